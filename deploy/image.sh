#!/usr/bin/env bash
# Builds the Atomic Rides container image and loads it into podman,
# reproducibly: the same source and SOURCE_DATE_EPOCH give the same image ID.
#
#   deploy/image.sh [NAME:TAG]     (go tool task image [-- NAME:TAG])
#
# The binary is static (CGO_ENABLED=0) and built on this machine without
# paths or build ids that differ between machines (-trimpath, empty
# -buildid). deploy/imagebuild writes the image FROM scratch (no base image,
# so no registry is needed) with every timestamp set to SOURCE_DATE_EPOCH:
# the caller's, else the time of the last commit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag="${1:-localhost/atomicrides:dev}"
certs="${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}"

command -v podman >/dev/null || { echo "image: podman not found (apt-get install podman)" >&2; exit 1; }
[ -s "$certs" ] || { echo "image: $certs missing (apt-get install ca-certificates)" >&2; exit 1; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
arch="$(go env GOARCH)"
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" \
	go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$work/atomicrides" .
go run ./deploy/imagebuild -bin "$work/atomicrides" -certs "$certs" -tag "$tag" \
	-epoch "$SOURCE_DATE_EPOCH" -arch "$arch" -o "$work/image.tar"
podman load --quiet --input "$work/image.tar" >/dev/null
echo "$tag $(podman image inspect --format '{{.Id}}' "$tag")"
