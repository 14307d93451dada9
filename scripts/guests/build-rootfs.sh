#!/bin/sh
# Build (once) the Debian bookworm minbase root filesystem the test guests run from, and cache it as a
# tarball so later runs only unpack it. Needs root and a Debian mirror (apt's usual source).
#   VGPUCTL_GUEST_CACHE  cache directory (default /var/cache/vgpuctl-guests)
#   VGPUCTL_GUEST_MIRROR Debian mirror (default http://deb.debian.org/debian)
# Prints the tarball path on stdout.
set -eu

cache=${VGPUCTL_GUEST_CACHE:-/var/cache/vgpuctl-guests}
mirror=${VGPUCTL_GUEST_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
# Bump when the package list changes so a stale cache is not reused.
version=4
tarball="$cache/$suite-minbase-v$version.tar.gz"

# Everything the roles touch offline: apt state=present on these needs no network.
packages=openssh-server,openssh-client,python3,python3-apt,python3-venv,python3-packaging,sudo,iproute2,iputils-ping,kmod,procps,\
initramfs-tools,rdma-core,ibverbs-utils,perftest,ca-certificates,netbase

if [ -s "$tarball" ]; then
    echo "$tarball"
    exit 0
fi

command -v debootstrap >/dev/null || { echo "debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >&2
# Host keys are made per guest at start; a shared key would hide known_hosts mistakes.
rm -f "$work/root"/etc/ssh/ssh_host_*
chroot "$work/root" apt-get clean
tar -C "$work/root" -czf "$work/rootfs.tar.gz" .
mv "$work/rootfs.tar.gz" "$tarball"
echo "$tarball"
