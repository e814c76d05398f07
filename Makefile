# The README's commands: `make demo` and `make test` each set up what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rbs-setup
PYTEST_ARGS ?=

.PHONY: setup demo test lint layout typecheck unit proto proto-check bench clean-venv system-deps

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.lock
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation --config-settings editable_mode=compat -e .
	@touch $(STAMP)

# Debian packages some tests need (real Bazel for the interop tests; zsh and fish for
# the shell completion tests; chromium and chromium-driver for the dashboard browser tests; Prometheus, whose service is never started, for the metrics test;
# podman, runc and busybox-static for the container job tests; tmux for the --pty test).
system-deps:
	@command -v bazel >/dev/null 2>&1 || { \
	  echo "installing Debian's bazel-bootstrap for the Bazel interop tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bazel-bootstrap >/dev/null) \
	  || echo "warning: could not install bazel-bootstrap; Bazel interop tests will be skipped"; }
	@{ command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1; } || { \
	  echo "installing zsh and fish for the shell completion tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zsh fish >/dev/null) \
	  || echo "warning: could not install zsh and fish; their completion tests will be skipped"; }
	@{ command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && test -x /bin/busybox; } || { \
	  echo "installing podman, runc and busybox-static for the container job tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc busybox-static >/dev/null) \
	  || echo "warning: could not install podman, runc and busybox-static; container tests will be skipped"; }
	@{ test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; } || { \
	  echo "installing Debian's chromium and chromium-driver for the dashboard's browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null) \
	  || echo "warning: could not install chromium and chromium-driver; the dashboard's browser tests will be skipped"; }
	@command -v tmux >/dev/null 2>&1 || { \
	  echo "installing tmux for the --pty job test (a real terminal)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null) \
	  || echo "warning: could not install tmux; the --pty terminal test will be skipped"; }
	@test -x /usr/bin/prometheus || { \
	  echo "installing Debian's prometheus (not its service) for the metrics test"; \
	  sh scripts/install_prometheus.sh \
	  || echo "warning: could not install prometheus; the Prometheus scrape test will be skipped"; }

# Build the example job targets and run them on the embedded local cluster.
demo: setup
	@bash examples/demo.sh

proto: setup
	$(PY) scripts/gen_proto.py

proto-check: setup
	$(PY) scripts/gen_proto.py --check

lint: setup
	$(VENV)/bin/ruff format --check rbs tests bench scripts
	$(VENV)/bin/ruff check rbs tests bench scripts

# Package arrows, import cycles, duplicate class names, module sizes (docs/ARCHITECTURE.md).
layout: setup
	$(PY) scripts/check_layout.py

typecheck: setup
	$(VENV)/bin/mypy

unit: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: setup system-deps proto-check lint layout typecheck unit

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
