#!/usr/bin/env bash
# Builds the Atomic Rides container image with podman, reproducibly: the same
# source and SOURCE_DATE_EPOCH give the same image ID.
#
#   deploy/image.sh [TAG]     (default atomicrides:dev; go tool task image -- TAG)
#
# The binary is static (CGO_ENABLED=0) and built on this machine, without
# paths or build ids that differ between machines (-trimpath, empty
# -buildid); the image is FROM scratch, so no registry is needed. Every
# timestamp in the image (its creation, its history, its files) is
# SOURCE_DATE_EPOCH: set by the caller, else the time of the last commit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag="${1:-atomicrides:dev}"
certs="${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}"

command -v podman >/dev/null || { echo "image: podman not found (apt-get install podman)" >&2; exit 1; }
[ -s "$certs" ] || { echo "image: $certs missing (apt-get install ca-certificates)" >&2; exit 1; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$(go env GOARCH)" \
	go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$ctx/atomicrides" .)
install -m 0644 "$certs" "$ctx/ca-certificates.crt"
chmod 0755 "$ctx/atomicrides"

# --format docker: the OCI image format has no HEALTHCHECK, and podman drops
# it there. --no-cache: every build commits its layers afresh, so that the
# same ID for the same inputs is a property of the build, not of its cache.
podman build --quiet --format docker --no-cache --timestamp "$SOURCE_DATE_EPOCH" \
	--file "$root/deploy/Containerfile" --tag "$tag" "$ctx" >/dev/null
echo "$tag $(podman image inspect --format '{{.Id}}' "$tag")"
