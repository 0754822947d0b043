#!/bin/sh
# Run librdkafka's integration tests against one broker, one test program at a time,
# sequentially, and print one line per test program: number, state, seconds, exit code.
#
#   run-suite.sh LIBRDKAFKA_DIR HOST:PORT OUT_DIR [TEST_NUMBER...]
#
# LIBRDKAFKA_DIR is a librdkafka checkout built with `./configure --disable-gssapi && make`
# and `make -C tests build`. Without test numbers, every tests/0NNN-*.c(pp) runs. Each
# program's full output goes to OUT_DIR/NNNN.log, the table to OUT_DIR/results.txt.
# Kafka's shell tools (kafka-topics.sh, kafka-acls.sh, kafka-configs.sh,
# kafka-run-class.sh) come from the wrappers next to this script (KAFKA_PATH).
# Environment: TEST_KAFKA_VERSION (default 3.9.0), TEST_SCENARIO (e.g. noautocreate),
# TEST_TIMEOUT_MULTIPLIER (test.timeout.multiplier), HEADRACE_JVM_LIB (the jars' folder).
set -u
[ $# -ge 3 ] || { sed -n '2,14p' "$0"; exit 2; }
rdk=$(cd "$1" && pwd) bootstrap=$2 out=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"; out=$(cd "$out" && pwd)
lib=${HEADRACE_JVM_LIB:-$here/../../jvm/lib}
export HEADRACE_JVM_LIB=$lib
export KAFKA_PATH=$here/kafka BROKERS=$bootstrap KAFKA_JARS=$lib/kafka
export TEST_KAFKA_VERSION=${TEST_KAFKA_VERSION:-3.9.0}
export LD_LIBRARY_PATH=$rdk/src:$rdk/src-cpp
export RDKAFKA_TEST_CONF=$out/test.conf
echo "bootstrap.servers=$bootstrap" > "$RDKAFKA_TEST_CONF"
# librdkafka's own knob for slow machines: every test timeout times this factor.
if [ -n "${TEST_TIMEOUT_MULTIPLIER:-}" ]; then
    echo "test.timeout.multiplier=$TEST_TIMEOUT_MULTIPLIER" >> "$RDKAFKA_TEST_CONF"
fi
cd "$rdk/tests"
if [ $# -eq 0 ]; then
    set -- $(ls 0[0-9][0-9][0-9]-*.c 0[0-9][0-9][0-9]-*.cpp | cut -c1-4 | sort -u)
fi
for t in "$@"; do
    start=$(date +%s)
    TESTS=$t nice -n 19 ./test-runner -L -K -p1 > "$out/$t.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    # The summary table's row for the test: "| 0113_name | PASSED | 1.234s |".
    state=$(sed 's/\x1b\[[0-9;]*m//g' "$out/$t.log" \
            | awk -F'|' -v t="$t" '$2 ~ "^ "t"_" {gsub(/ /,"",$3); print $3}' | sort -u | tr '\n' ' ')
    printf '%s\t%s\t%ss\trc=%s\n' "$t" "${state:-NONE}" "$secs" "$rc" | tee -a "$out/results.txt"
done
