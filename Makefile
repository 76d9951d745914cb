# The two commands of the README, plus their parts.
.PHONY: demo test setup crd image

demo: setup
	.venv/bin/trimtab demo

test:
	scripts/test.sh

setup:
	scripts/setup.sh

crd:
	.venv/bin/trimtab crd > crds/inferencepool.yaml
	cp crds/inferencepool.yaml charts/trimtab/crds/inferencepool.yaml

# The operator image, built without a Docker daemon (scripts/image.sh says how; needs root).
image:
	scripts/image.sh
