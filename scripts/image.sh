#!/usr/bin/env bash
# Build the trimtab operator image without a Docker daemon (`make image`).
#
#   1. the trimtab wheel, built from the repository root with `pip wheel --no-deps .`;
#   2. a base image: a minimal Debian root filesystem made by mmdebstrap from Debian's
#      packages (Essential set + python3 + python3-venv + libstdc++6 for the grpcio wheel; no
#      apt, no docs; shells and text tools removed except what dpkg itself needs), imported as
#      localhost/trimtab-base:SUITE-HASH; or BASE_IMAGE, any image with python3 >= 3.11;
#   3. the operator layer on top of it: a venv in /opt/trimtab holding the wheel and only its
#      runtime dependencies (pip resolves them from the package index; binary wheels only, so
#      nothing is compiled), pip itself removed, a non-root user (uid 65532, as in the chart);
#   4. committed into the containers-storage that podman and buildah share as
#      localhost/trimtab/trimtab:VERSION (and docker.io/trimtab/trimtab:VERSION, the chart's
#      default image), and written out as build/trimtab-image.oci.tar (OCI archive) and
#      build/trimtab-image.docker.tar (docker-archive, for `kind load image-archive` and
#      `minikube image load`).
#
# Environment:
#   BASE_IMAGE      build on this image instead of the mmdebstrap base (pulled if not local)
#   DEBIAN_SUITE    Debian release of the mmdebstrap base [bookworm]
#   DEBIAN_MIRROR   Debian mirror [http://deb.debian.org/debian]
#   IMAGE_NAME      repository name [trimtab/trimtab]
#   IMAGE_OUT       folder for the archives [build]
#   IMAGE_REBUILD=1 rebuild even when the inputs match the last build
#   PYTHON          the Python that builds the wheel [.venv/bin/python, else python3]
#
# Needs root (mmdebstrap, buildah mount, chroot) and the Debian packages mmdebstrap, buildah
# and podman (scripts/setup.sh installs them). The last line printed is the image reference.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."

suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base_image=${BASE_IMAGE:-}
name=${IMAGE_NAME:-trimtab/trimtab}
out=${IMAGE_OUT:-build}
uid=65532
work=$out/image
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi

log() { echo "image: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap, buildah mount and chroot need it)"
need=(buildah podman)
[ -n "$base_image" ] || need+=(mmdebstrap)
for tool in "${need[@]}"; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs it)"
done

started=$(date +%s)
mkdir -p "$work"

# 1. The wheel, from the repository root: whatever the root pyproject.toml packages.
log "building the trimtab wheel"
rm -rf "$work/wheel"
"$python" -m pip wheel --quiet --no-deps --disable-pip-version-check --wheel-dir "$work/wheel" . >&2
wheels=("$work"/wheel/trimtab-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || die "expected one trimtab wheel in $work/wheel"
wheel=${wheels[0]}
# The version is the wheel's (setuptools reads trimtab.__version__); no module path here.
version=$(basename "$wheel" | cut -d- -f2)
ref=localhost/$name:$version

# Inputs of the build: the wheel's contents (its RECORD hashes every file), this script, the
# base. The same inputs reuse the last build; pip resolves dependency versions again only then.
base_recipe="mmdebstrap $suite $mirror"
inputs=$(
  {
    "$python" - "$wheel" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    print(wheel.read(record).decode())
EOF
    sha256sum "$self"
    echo "${base_image:-$base_recipe} $name $uid"
  } | sha256sum | cut -c1-16
)
oci=$out/trimtab-image.oci.tar
docker_archive=$out/trimtab-image.docker.tar
if [ "${IMAGE_REBUILD:-0}" != 1 ] && [ -f "$oci" ] && [ -f "$docker_archive" ] \
  && [ "$(cat "$out/trimtab-image.inputs" 2>/dev/null)" = "$inputs" ] \
  && [ "$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "io.trimtab.image.inputs"}}' "$ref" 2>/dev/null)" = "$inputs" ]; then
  log "inputs unchanged ($inputs): reusing $ref and $oci"
  echo "$ref"
  exit 0
fi

# 2. The base image.
if [ -n "$base_image" ]; then
  base=$base_image
  log "base: $base (BASE_IMAGE)"
else
  # Debian's Essential set and python3, merged /usr, no apt, no documentation. Then the
  # Essential packages the operator never runs are removed (dpkg keeps its database, so image
  # scanners still see every package that is there); dpkg, dash and coreutils stay for dpkg
  # and for the RUN steps of the Dockerfile, which can build on this base too.
  unneeded="bash bsdutils findutils grep gzip hostname login mawk ncurses-bin sed sysvinit-utils"
  unneeded+=" util-linux util-linux-extra"
  mm=(
    mmdebstrap --variant=essential --include=python3,python3-venv,libstdc++6
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --aptopt='Acquire::Check-Valid-Until "false"'
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --customize-hook="chroot \"\$1\" dpkg --remove --force-remove-essential --force-depends $unneeded"
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/log/* "$1"/var/lib/apt'
    "$suite"
  )
  base_tag=$(printf '%s\n' "${mm[@]}" "$mirror" | sha256sum | cut -c1-12)
  base=localhost/trimtab-base:$suite-$base_tag
  if buildah inspect --type image "$base" >/dev/null 2>&1; then
    log "base: $base (cached)"
  else
    log "base: $base from mmdebstrap ($suite)"
    rm -f "$work/base.tar"
    "${mm[@]}" "$work/base.tar" "$mirror" >"$work/mmdebstrap.log" 2>&1 \
      || die "mmdebstrap failed; see $work/mmdebstrap.log"
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$work/base.tar" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd '["python3"]' --label "org.opencontainers.image.description=Debian $suite, python3" \
      "$ctr"
    buildah commit --quiet --rm --format oci "$ctr" "$base" >/dev/null
    rm -f "$work/base.tar"
  fi
fi

# 3. The operator layer: a venv from the base's own python3, filled inside a chroot.
log "installing $(basename "$wheel") and its runtime dependencies"
ctr=$(buildah from --quiet "$base")
mnt=$(buildah mount "$ctr")
cleanup() {
  buildah umount "$ctr" >/dev/null 2>&1 || true
  buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
py=
for candidate in /usr/local/bin/python3 /usr/bin/python3; do
  if [ -e "$mnt$candidate" ] || [ -L "$mnt$candidate" ]; then
    py=$candidate
    break
  fi
done
[ -n "$py" ] || die "$base has no python3 in /usr/local/bin or /usr/bin"
chroot=$(command -v chroot)
in_root() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$chroot" "$mnt" "$@"; }
pip=(/opt/trimtab/bin/python -m pip --disable-pip-version-check --no-input --no-cache-dir)
in_root "$py" -m venv /opt/trimtab
# The dependencies are downloaded here, by this machine's pip and its configuration (index,
# proxy, certificates), as binary wheels for the base's interpreter and platform tags as that
# interpreter reports them; the chroot installs them offline.
read -r interpreter abis platforms < <(in_root /opt/trimtab/bin/python -c '
from pip._vendor.packaging import tags
sys_tags = list(tags.sys_tags())
def joined(values): return ",".join(dict.fromkeys(values))
print(tags.interpreter_version(), joined(t.abi for t in sys_tags), joined(t.platform for t in sys_tags))
')
download=(--only-binary=:all: --implementation cp --python-version "$interpreter")
IFS=, read -r -a abi_list <<<"$abis"
IFS=, read -r -a platform_list <<<"$platforms"
for abi in "${abi_list[@]}"; do download+=(--abi "$abi"); done
for platform in "${platform_list[@]}"; do download+=(--platform "$platform"); done
rm -rf "$work/wheels"
"$python" -m pip download --quiet --disable-pip-version-check "${download[@]}" \
  --dest "$work/wheels" "$wheel" >"$work/pip-download.log" 2>&1 \
  || die "pip download failed; see $work/pip-download.log"
stage=/tmp/trimtab-build
rm -rf "${mnt:?}$stage"
mkdir -p "$mnt$stage"
cp -r "$work/wheels" "$mnt$stage/"
in_root "${pip[@]}" install --quiet --no-index --find-links "$stage/wheels" \
  "$stage/wheels/$(basename "$wheel")" >&2
in_root "${pip[@]}" check >&2
in_root "${pip[@]}" uninstall --quiet --yes pip setuptools >&2
in_root /opt/trimtab/bin/trimtab version >/dev/null
rm -rf "${mnt:?}$stage"
# The non-root user the chart runs as (runAsUser 65532), with no home and no login shell.
touch "$mnt/etc/passwd" "$mnt/etc/group"
grep -q "^[^:]*:[^:]*:$uid:" "$mnt/etc/passwd" \
  || echo "trimtab:x:$uid:$uid:trimtab:/nonexistent:/usr/sbin/nologin" >>"$mnt/etc/passwd"
grep -q "^[^:]*:[^:]*:$uid:" "$mnt/etc/group" || echo "trimtab:x:$uid:" >>"$mnt/etc/group"
buildah umount "$ctr" >/dev/null

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
buildah config \
  --user "$uid:$uid" --workingdir / \
  --env PATH=/opt/trimtab/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
  --port 18000 --port 9090 --port 8080 \
  --entrypoint '["trimtab"]' --cmd '["run", "--all-namespaces"]' \
  --label org.opencontainers.image.title=trimtab \
  --label "org.opencontainers.image.description=Kubernetes operator that balances LLM serving replicas by their real load" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.base.name=${base_image:-$base}" \
  --label "io.trimtab.image.inputs=$inputs" \
  "$ctr"

# 4. Into the shared containers-storage (podman sees it at once), then the archives.
buildah commit --quiet --rm --format oci "$ctr" "$ref" >/dev/null
trap - EXIT
buildah tag "$ref" "docker.io/$name:$version"
rm -f "$oci" "$docker_archive"
buildah push --quiet "$ref" "oci-archive:$oci:docker.io/$name:$version" >/dev/null
buildah push --quiet "$ref" "docker-archive:$docker_archive:docker.io/$name:$version" >/dev/null
echo "$inputs" >"$out/trimtab-image.inputs"
podman image exists "$ref" || die "podman does not see $ref"

size=$(podman image inspect --format '{{.Size}}' "$ref")
log "built $ref in $(($(date +%s) - started)) s: $((size / 1000000)) MB uncompressed," \
  "$(($(stat -c %s "$oci") / 1000000)) MB as $oci"
echo "$ref"
