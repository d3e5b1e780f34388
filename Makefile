# The book's two commands: `make book` and `make test` (both install what they need).
SHELL := /bin/bash
# Bytecode is written where Python first imports a module, by whichever process does: each of
# the 8,900 modules the book and tests import is compiled once, by the first kernel or test that
# needs it. (Where PYTHONDONTWRITEBYTECODE is set, every kernel and subprocess compiled them all
# again; compiling every installed package at install time, 20,400 modules, took 45 s more.)
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: book execute html test bench clean install browser

install: $(STAMP) node_modules/.package-lock.json

# Everything with uv: the same pins, installed about ten times faster than pip. torch from the
# folder pip's configuration names as find-links (PIP_FIND_LINKS or pip.conf), where the CPU
# wheel lies (torch from PyPI is the multi-GB CUDA build): uv reads no pip.conf, so it is told.
$(STAMP): pyproject.toml requirements-vllm.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q uv==0.13.9
	links="$${PIP_FIND_LINKS:-$$($(PIP) config get global.find-links 2>/dev/null)}"; \
	  $(VENV)/bin/uv pip install -q --python $(PY) \
	    $$(for d in $$links; do printf -- '--find-links %s ' "$$d"; done) torch==2.13.0
	$(VENV)/bin/uv pip install -q --python $(PY) -e ".[book,test,crosscheck]"
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -r requirements-vllm.txt
	touch $(STAMP)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# Debian's chromium for the offline browser test (root on CI and dev machines), without the
# packages it only recommends (printing, audio, desktop services: half the install's time)
# but with the font its recommends would bring, which the pages are measured in.
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null; }

execute: install
	$(PY) book/pipeline.py

html: install
	$(VENV)/bin/jupyter-book build -W -n --keep-going book

book: execute html

# The packages and Chromium install side by side (both mostly wait on downloads), then the tests.
test:
	$(MAKE) -j2 install browser
	$(VENV)/bin/ruff check kvlib tests book
	KVLIB_NO_SKIPS=1 $(PY) -m pytest -q

bench: install
	$(PY) -m kvlib.report.bench

clean:
	rm -rf book/_build book/chapters
