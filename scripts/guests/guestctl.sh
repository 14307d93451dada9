#!/bin/sh
# Test guests for the guest playbooks: Debian chroots, each running sshd in its own network namespace
# with its own address on a host-only bridge. Needs root, iproute2, unshare (util-linux).
#
#   guestctl.sh up DIR N     start N guests (names guest1..guestN) under DIR; prints "name address" lines
#   guestctl.sh down DIR     stop the guests under DIR and remove their namespaces, links and files
#
# Environment:
#   VGPUCTL_GUEST_PREFIX  prefix of namespace/link names (default vgg; at most 6 characters)
#   VGPUCTL_GUEST_NET     first three octets of the guest network (default 10.213.0); host side is .1,
#                         guest i is .(10+i)
#   VGPUCTL_GUEST_CACHE   where build-rootfs.sh caches the root filesystem tarball
#
# DIR afterwards holds: id_ed25519(.pub) (the controller's key, authorized for root in every guest),
# known_hosts (every guest's host key under its address), guests (name address lines), and one folder per
# guest: root/ (its filesystem), pid (the process that holds its namespaces), console.log (sshd's output).
# Without systemd in the chroots, sshd runs as the child of a small shell that is PID 1 of the guest's own
# PID namespace; stopping that process stops everything the guest started.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
prefix=${VGPUCTL_GUEST_PREFIX:-vgg}
net=${VGPUCTL_GUEST_NET:-10.213.0}
bridge="${prefix}br"

die() { echo "guestctl: $*" >&2; exit 1; }

up() {
    dir=$1 count=$2
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, chroot)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    tarball=$("$here/build-rootfs.sh")
    [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C vgpuctl-test-controller -f "$dir/id_ed25519"
    : > "$dir/known_hosts"
    : > "$dir/guests"
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add "$bridge" type bridge
        ip addr add "$net.1/24" dev "$bridge"
        ip link set "$bridge" up
    fi
    i=1
    while [ "$i" -le "$count" ]; do
        start_guest "$dir" "$i" "$tarball"
        i=$((i + 1))
    done
    wait_for_sshd "$dir"
    cat "$dir/guests"
}

start_guest() {
    dir=$1 i=$2 tarball=$3
    name="guest$i" ns="$prefix$i" addr="$net.$((10 + i))"
    gdir="$dir/$name" root="$dir/$name/root"
    rm -rf "$gdir"
    mkdir -p "$root"
    tar -C "$root" -xzf "$tarball"

    # Identity of this guest: its own host keys, hostname, root's authorized key.
    echo "$name" > "$root/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" > "$root/etc/hosts"
    chroot "$root" ssh-keygen -A >/dev/null
    mkdir -p "$root/root/.ssh"
    chmod 700 "$root/root/.ssh"
    cp "$dir/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
    chmod 600 "$root/root/.ssh/authorized_keys"
    cat > "$root/etc/ssh/sshd_config.d/vgpuctl-test.conf" <<EOF
# pam_loginuid and friends cannot work in a chroot without systemd
UsePAM no
PermitRootLogin yes
PasswordAuthentication yes
ListenAddress $addr
EOF
    echo "$addr $(cut -d' ' -f1,2 "$root/etc/ssh/ssh_host_ed25519_key.pub")" >> "$dir/known_hosts"

    # Network: a veth pair, host end on the bridge, guest end as eth0 in the namespace.
    ip netns del "$ns" 2>/dev/null || true
    ip link del "${ns}h" 2>/dev/null || true
    ip netns add "$ns"
    ip link add "${ns}h" type veth peer name "${ns}g"
    ip link set "${ns}g" netns "$ns"
    ip link set "${ns}h" master "$bridge" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set "${ns}g" name eth0
    ip netns exec "$ns" ip addr add "$addr/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up

    # PID 1 of the guest's PID namespace is a shell waiting on sshd; /proc, /dev and /run are private mounts.
    ip netns exec "$ns" unshare --mount --pid --uts --fork --kill-child --propagation private /bin/sh -c "
        hostname '$name' &&
        mount -t proc proc '$root/proc' &&
        mount --rbind /dev '$root/dev' &&
        mount -t tmpfs -o mode=755 tmpfs '$root/run' &&
        mkdir -p '$root/run/sshd' &&
        exec chroot '$root' /bin/sh -c '/usr/sbin/sshd -D -e & wait'
    " > "$gdir/console.log" 2>&1 &
    echo $! > "$gdir/pid"
    echo "$name $addr" >> "$dir/guests"
}

wait_for_sshd() {
    dir=$1
    while read -r name addr; do
        tries=0
        until ssh -q -i "$dir/id_ed25519" -o BatchMode=yes -o ConnectTimeout=2 \
            -o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes "root@$addr" true; do
            tries=$((tries + 1))
            [ "$tries" -lt 60 ] || die "$name ($addr): sshd did not come up; see $dir/$name/console.log"
            sleep 0.5
        done
    done < "$dir/guests"
}

down() {
    dir=$1
    [ -d "$dir" ] || return 0
    for gdir in "$dir"/guest*; do
        [ -d "$gdir" ] || continue
        i=${gdir##*/guest}
        ns="$prefix$i"
        if [ -f "$gdir/pid" ]; then
            pid=$(cat "$gdir/pid")
            kill "$pid" 2>/dev/null || true
            n=0
            while kill -0 "$pid" 2>/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
            kill -9 "$pid" 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
        ip link del "${ns}h" 2>/dev/null || true
        rm -rf "$gdir"
    done
    # The bridge goes when no guest link is left on it.
    if ip link show "$bridge" >/dev/null 2>&1 && [ -z "$(ip -o link show master "$bridge" 2>/dev/null)" ]; then
        ip link del "$bridge"
    fi
}

case "${1:-}" in
    up) [ $# -eq 3 ] || die "usage: $0 up DIR N"; up "$2" "$3" ;;
    down) [ $# -eq 2 ] || die "usage: $0 down DIR"; down "$2" ;;
    *) die "usage: $0 up DIR N | down DIR" ;;
esac
