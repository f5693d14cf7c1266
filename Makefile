# Every target delegates to make.py, the canonical task runner (it needs only Python).
# Extra arguments: make bench ARGS='--quick'
PYTHON ?= python3

.PHONY: help build test test-quick bench bench-md check-deps deps-proof demo video-demo soak screenshots clean
help: ; @$(PYTHON) make.py
build: ; @$(PYTHON) make.py build $(ARGS)
test: ; @$(PYTHON) make.py test $(ARGS)
test-quick: ; @$(PYTHON) make.py test-quick $(ARGS)
bench: ; @$(PYTHON) make.py bench $(ARGS)
bench-md: ; @$(PYTHON) make.py bench-md $(ARGS)
check-deps: ; @$(PYTHON) make.py check-deps $(ARGS)
deps-proof: ; @$(PYTHON) make.py deps-proof $(ARGS)
demo: ; @$(PYTHON) make.py demo $(ARGS)
video-demo: ; @$(PYTHON) make.py video-demo $(ARGS)
soak: ; @$(PYTHON) make.py soak $(ARGS)
screenshots: ; @$(PYTHON) make.py screenshots $(ARGS)
clean: ; @$(PYTHON) make.py clean $(ARGS)
