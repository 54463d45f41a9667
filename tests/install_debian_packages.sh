#!/usr/bin/env bash
# The Debian packages the tests use as real servers and tools, installed when missing: chromium (the report in a
# browser, tests/e2e/test_report_browser.py), postgresql (Optuna's PostgreSQL storage,
# tests/integration/test_postgres_storage.py), and slurm-wlm with munge (a real Slurm controller and node for
# examples/slurm/headsweep.sbatch, tests/e2e/test_slurm.py). Idempotent; needs root and apt (CI runs `make test` as
# root on a fresh Debian machine). Without root the browser and Slurm tests skip and the PostgreSQL tests say what to
# install.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/bin/sbatch ]; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_debian_packages.sh: not root or no apt-get; install them yourself: apt-get install ${missing[*]}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
echo "install_debian_packages.sh: installed ${missing[*]}"
