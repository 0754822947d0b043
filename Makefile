# The two commands: `make demo` and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test setup lint typecheck bench clean

setup: $(STAMP) .stamp-system jvm/lib/.stamp jvm/lib/.stamp-archive jvm/lib/.stamp-kafka-archive \
	.tools/bin/weed

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip 2>/dev/null || true
	@echo "installing headrace and its dev tools into $(VENV) ..."
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2> >(grep -v 'is ignored: it is neither' >&2)
	@touch $(STAMP)

# Debian packages the tests use, and the Java check (Spark needs 17+).
.stamp-system: scripts/setup-system.sh
	@bash scripts/setup-system.sh
	@touch .stamp-system

# JVM pieces from Maven Central: Spark's Kafka connector, Apache Kafka, the Java client;
# the real-time rule operator, compiled against the venv's PySpark jars (hence after the venv).
JVM_SOURCES := $(shell find jvm -name pom.xml -o -name '*.java' 2>/dev/null)
jvm/lib/.stamp: $(JVM_SOURCES) scripts/setup-jvm.sh $(STAMP)
	@if bash scripts/setup-jvm.sh; then touch jvm/lib/.stamp; else echo "continuing without the JVM pieces" >&2; fi

# The Spark JVM's class-data archive (headrace.spark.archive): sessions start on about half
# the CPU time. Optional: without it Spark starts as usual.
jvm/lib/.stamp-archive: jvm/lib/.stamp $(STAMP)
	@PYSPARK_PYTHON=$(abspath $(BIN))/python $(BIN)/python -m headrace.spark.archive || true
	@mkdir -p $(@D) && touch $@

# The same for Apache Kafka's JVMs (headrace.cluster.archive): the reference broker, the
# cluster's nodes and Kafka's tools. Optional too.
jvm/lib/.stamp-kafka-archive: jvm/lib/.stamp $(STAMP)
	@$(BIN)/python -m headrace.cluster.archive || true
	@mkdir -p $(@D) && touch $@

# SeaweedFS's weed, the S3 object store of the tiered-storage tests, built with Go.
.tools/bin/weed: scripts/setup-weed.sh
	@bash scripts/setup-weed.sh

# headrace's own modules compiled ahead (only what changed since the last time): the tests,
# a demo and Spark start many Python processes, and where PYTHONDONTWRITEBYTECODE is set
# each of them would compile every module it imports from source (about a third of a
# broker's start).
PYC := $(BIN)/python -m compileall -q src tests bench >/dev/null

demo: setup
	@$(PYC)
	@PYSPARK_PYTHON=$(abspath $(BIN))/python $(BIN)/python -m headrace demo fraud

# Tests spread over TEST_WORKERS processes in groups (tests/timing.py: Spark applications
# together, the SparkSession's tests together, each other module whole), and the time
# per area reported at the end. Three on two cores: the modules outside Spark wait on round
# trips and process starts, and a third worker fills that (tests/README.md).
TEST_WORKERS ?= 3
test: setup
	@$(BIN)/ruff check -q src tests bench
	@$(BIN)/mypy --no-error-summary src/headrace
	@$(PYC)
	@PYSPARK_PYTHON=$(abspath $(BIN))/python $(BIN)/python -m pytest -q -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# ruff's lint rules only: the code is laid out by hand within ruff's line length, and
# `ruff format` would rewrite most files (448 of 549), so it is not the house layout.
lint: setup
	@$(BIN)/ruff check src tests bench

typecheck: setup
	@$(BIN)/mypy src/headrace

bench: setup
	@$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) .stamp-system build dist src/*.egg-info jvm/lib jvm/*/target
