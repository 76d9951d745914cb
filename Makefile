# The two commands of the README, plus their parts.
.PHONY: demo test setup crd

demo: setup
	.venv/bin/trimtab demo

test:
	scripts/test.sh

setup:
	scripts/setup.sh

crd:
	.venv/bin/trimtab crd > crds/inferencepool.yaml
	cp crds/inferencepool.yaml charts/trimtab/crds/inferencepool.yaml
