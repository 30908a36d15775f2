# Two entry points that work on a machine with only python3 (3.10+), pip and make.
#   make demo   run the suite's demo; the report lands in ./report
#   make test   run nox: lint and every package's tests, each in its own virtualenv
PYTHON ?= python3
TOOLS := .venv-tools
NOX := $(TOOLS)/bin/nox

.PHONY: demo test lint bench clean

$(NOX):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet -c constraints.txt "nox>=2024.4.15"

demo: $(NOX)
	$(NOX) -s demo
	@echo "report written to ./report"

test: $(NOX)
	$(NOX)

lint: $(NOX)
	$(NOX) -s lint

bench: $(NOX)
	$(NOX) -s bench -- $(or $(PACKAGE),gencore)

clean:
	rm -rf .nox $(TOOLS) report
