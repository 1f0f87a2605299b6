#!/usr/bin/env bash
# Debian packages the test suite needs beyond Python/Java/C++: a headless browser for the UI test, the
# PostgreSQL server for Airflow's metadata in the end-to-end tests (they start a private server from
# /usr/lib/postgresql/<major>/bin), and for the compose end-to-end test the Docker engine, the Compose v1 CLI and
# debootstrap (scripts/compose_e2e.sh starts dockerd itself).
set -euo pipefail
# shellcheck source=scripts/progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/progress.sh"
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v docker-compose >/dev/null || missing+=(docker-compose)   # validates and runs docker-compose.yaml
command -v dockerd >/dev/null || missing+=(docker.io)   # the engine of the compose end-to-end test (scripts/compose_e2e.sh)
command -v debootstrap >/dev/null || missing+=(debootstrap)   # local base images where no registry answers
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && { echo "== system packages: all present"; exit 0; }
if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
  # A password prompt would wait unseen: test.sh runs this script in the background with its output in a log.
  echo "setup: the test suite needs the Debian packages ${missing[*]}; install them as root" \
       "(sudo apt-get install ${missing[*]}), or run the test command as root, then run it again" >&2
  exit 1
fi
SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo -n")
step "system packages: apt-get update" $SUDO apt-get update -qq
STEP_QUIET=1 step "system packages: installing ${missing[*]} (a few minutes)" \
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
