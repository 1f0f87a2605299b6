#!/usr/bin/env bash
# Builds a local stand-in for python:3.11-slim-bookworm from Debian's own packages (debootstrap + docker import),
# for machines that reach a Debian mirror and PyPI but no image registry. Needs root (debootstrap).
#
#   docker/local/python/build.sh TAG
#
# The image carries this machine's CA trust (/usr/local/share/ca-certificates and the system bundle), and pip is
# told to use the system bundle: where egress goes through a TLS-inspecting proxy, pip inside a container fails
# with "No matching distribution" otherwise. That trust is the machine's, not the project's: the image stays local.
set -euo pipefail
TAG="${1:?usage: build.sh TAG}"
SUITE=bookworm

mirror() {  # the machine's own Debian mirror (deb822 or one-line sources), else deb.debian.org
  local found
  found=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
          | head -n 1 || true)
  [ -n "$found" ] || found=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list \
                               2>/dev/null || true)
  echo "${found:-http://deb.debian.org/debian}"
}

command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-pip,ca-certificates \
  "$SUITE" "$rootfs" "$(mirror)" >"$rootfs.log" 2>&1 || { tail -n 30 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
cp -a /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
chroot "$rootfs" update-ca-certificates >/dev/null
# Certificates a machine trusts without listing them in /usr/local/share (e.g. added to the bundle directly).
cat /etc/ssl/certs/ca-certificates.crt >>"$rootfs/etc/ssl/certs/ca-certificates.crt"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
ln -sf python3.11 "$rootfs/usr/bin/python"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  --message "debootstrap $SUITE minbase + python3.11 (docker/local/python/build.sh)" - "$TAG" >/dev/null
echo "built $TAG"
