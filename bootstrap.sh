#!/usr/bin/env bash
# The two set-up commands of ntg-testbed (run as root on Debian 12, or with the packages present):
#   ./bootstrap.sh quickstart   install what is needed, build, and run scenarios/quickstart.yaml
#   ./bootstrap.sh test         install what the tests need, build, and run the whole test suite
#                               (every lane; `./bootstrap.sh test -m unit` runs one, docs/testing.md)
#   ./bootstrap.sh bench [NAME] install the benchmarks' peers and run benchmarks/NAME.py (default: all)
#   ./bootstrap.sh debian-uri   print the URI of this machine's Debian mirror (the VM guest image uses it)
# Extra arguments after `test` go to pytest, after `quickstart` to `testbed run`.
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-quickstart}
[ $# -gt 0 ] && shift

# Debian packages: to build and run every shipped scenario (the generators' and parts' tools, see
# testbed.runner.required_tools), and (test) the real tools the tests check our output with.
APT_RUN=(python3 python3-venv python3-dev build-essential cmake git
         tcpdump iproute2 ethtool tcpreplay ostinato wireshark-common keepalived
         qemu-system-x86 qemu-utils mmdebstrap e2fsprogs openssh-client
         softflowd pmacct nfdump argus-server argus-client)
APT_TEST=(tshark clang-format)
APT_BENCH=(netsniff-ng tcpreplay libdpdk-dev pkg-config)
# Suricata 7 comes from bookworm-backports of the Debian archive this machine already uses.
APT_BACKPORTS=(suricata)

# The test suite's phases (markers from tests/conftest.py's lane table; docs/testing.md):
# together they select every test once (tests/test_lanes.py checks it). PHASE_BESIDE runs at the
# same time as PHASE_PARALLEL, one test at a time; PHASE_SERIAL after both.
PHASE_PARALLEL="not trex and not vm and not serial"
PHASE_BESIDE="vm and not trex and not serial"
PHASE_SERIAL="trex or serial"
TEST_WORKERS=3

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

missing_packages() {  # the packages among "$@" that are not installed, one a line
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

install_apt() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: these Debian packages are missing: ${missing[*]}" >&2
    echo "bootstrap: run this script as root (or install them: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  say "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

debian_uri() {
  # The URI of the machine's own Debian entry (deb822 or one-line format), never a fixed host.
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' "$f"
  done | head -n1 | grep . && return 0
  awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null | grep .
}

install_backports() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: missing ${missing[*]} (from bookworm-backports); run this script as root" >&2
    exit 1
  fi
  local list=/etc/apt/sources.list.d/ntg-bookworm-backports.sources
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    local uri
    uri=$(debian_uri) || { echo "bootstrap: no Debian bookworm entry in the apt sources to reuse" >&2; exit 1; }
    say "adding bookworm-backports from $uri"
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$uri" >"$list"
  fi
  say "installing from bookworm-backports: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -t bookworm-backports "${missing[@]}" >/dev/null
}

install_python() {
  local target=.
  [ -n "${1:-}" ] && target=".[$1]"
  if [ ! -x .venv/bin/python ]; then
    say "creating the virtual environment .venv"
    python3 -m venv .venv
  fi
  say "building the native engine and installing the project ($target)"
  .venv/bin/python -m pip install -q --disable-pip-version-check "$target"
}

selects_tests() {  # true when the pytest arguments "$@" choose tests (a lane, -k, a file)
  local a
  for a in "$@"; do
    case $a in
      -m | -m* | -k | -k* | --lf | --last-failed | tests* | *.py | *::*) return 0 ;;
    esac
  done
  return 1
}

run_pytest() {  # pytest "$@"; exit 5 (no tests collected) is a failure here
  local status=0
  .venv/bin/python -m pytest "$@" || status=$?
  if [ $status -eq 5 ]; then
    echo "bootstrap: pytest collected no tests ($*); that is a failure here" >&2
    return 1
  fi
  return $status
}

case "$mode" in
  quickstart)
    install_apt "${APT_RUN[@]}"
    install_backports "${APT_BACKPORTS[@]}"
    install_python
    say "running scenarios/quickstart.yaml"
    exec .venv/bin/testbed run scenarios/quickstart.yaml "$@"
    ;;
  test)
    install_apt "${APT_RUN[@]}" "${APT_TEST[@]}"
    install_backports "${APT_BACKPORTS[@]}"
    install_python test
    # The gosnappi example (scenarios/otg/gosnappi) is built by the tests: its modules come from
    # the Go module proxy now, once. Go itself is the machine's (Debian 12's golang is too old for
    # gosnappi's go 1.25; docs/otg.md); without it those tests skip, and fail under CI.
    go_bin=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
    if [ -n "$go_bin" ]; then
      say "fetching the gosnappi example's Go modules"
      (cd scenarios/otg/gosnappi && "$go_bin" mod download)
    fi
    if selects_tests "$@"; then  # one lane (-m unit), -k, or test files: as asked, in one go
      say "running the tests asked for"
      run_pytest "$@"
      exit $?
    fi
    # Every lane (docs/testing.md): the tests that are independent of each other on
    # $NTG_TEST_WORKERS xdist workers and, beside them, the VM lane one test at a time (its log
    # printed after); then the tests that need the machine to themselves.
    workers=${NTG_TEST_WORKERS:-$TEST_WORKERS}
    beside_log=$(mktemp)
    say "running the test suite, phase 1 of 2: -m \"$PHASE_PARALLEL\" on $workers workers, and beside it -m \"$PHASE_BESIDE\""
    run_pytest -m "$PHASE_BESIDE" "$@" >"$beside_log" 2>&1 &
    beside=$!
    status1=0
    run_pytest -n "$workers" --dist loadgroup -m "$PHASE_PARALLEL" "$@" || status1=$?
    status_beside=0
    wait $beside || status_beside=$?
    say "phase 1, beside: -m \"$PHASE_BESIDE\""
    cat "$beside_log"
    rm -f "$beside_log"
    say "running the test suite, phase 2 of 2: -m \"$PHASE_SERIAL\", one test at a time"
    status2=0
    run_pytest -m "$PHASE_SERIAL" "$@" || status2=$?
    say "phase 1: exit $status1 (beside: $status_beside), phase 2: exit $status2"
    for status in $status1 $status_beside $status2; do
      [ "$status" -ne 0 ] && exit "$status"
    done
    exit 0
    ;;
  bench)
    install_apt "${APT_RUN[@]}" "${APT_TEST[@]}" "${APT_BENCH[@]}"
    install_python bench
    names=("$@")
    [ ${#names[@]} -eq 0 ] && names=(bench_engine bench_engine_scale bench_threads bench_live bench_flor_perf flor_timing bench_ingest bench_stream bench_export bench_catalog bench_validate bench_hashes bench_match bench_match_rte bench_multiply bench_multiply_live bench_multihost)
    for name in "${names[@]}"; do
      say "benchmarks/$name.py"
      .venv/bin/python "benchmarks/$name.py"
    done
    ;;
  debian-uri)  # the guest image of the VM back end (testbed/endpoints/vm/image.py) uses it too
    debian_uri
    ;;
  *)
    echo "usage: ./bootstrap.sh quickstart|test|bench|debian-uri [arguments]" >&2
    exit 2
    ;;
esac
