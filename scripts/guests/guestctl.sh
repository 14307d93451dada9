#!/bin/sh
# Test guests for the guest playbooks: Debian chroots, each running sshd in its own network namespace
# with its own address on a host-only bridge. Needs root, iproute2, unshare (util-linux).
#
#   guestctl.sh up DIR N     start N guests (names guest1..guestN) under DIR; prints "name address" lines
#   guestctl.sh down DIR     stop the guests under DIR and remove their namespaces, links and files
#
# One guest at a time, for the simulator's guests (`vgpuctl sim up --guests`: gpusim runs these as a VM
# powers on, off, or is destroyed):
#   guestctl.sh prepare DIR          the shared root filesystem (unpacked once next to its cached tarball),
#                                    the controller's key, the bridge; checks that overlay mounts work
#   guestctl.sh start DIR I [NAME]   start guest I (guestI, address .(10+I)) with hostname NAME (default guestI);
#                                    its disk (an overlay's upper folder) is kept from an earlier start;
#                                    prints "guestI address" once its sshd answers
#   guestctl.sh stop DIR I           stop guest I and remove its namespace and link; its disk stays
#   guestctl.sh remove DIR I         stop guest I and remove its disk
# Their root is an overlay of the shared root filesystem, mounted in the guest's own mount namespace only: it
# goes away with the guest's processes. Each address keeps its SSH host key across starts and sessions
# (VGPUCTL_GUEST_HOST_KEYS), so known_hosts files that saw a guest stay valid.
#
# Environment:
#   VGPUCTL_GUEST_PREFIX  prefix of namespace/link names (default vgg; at most 6 characters)
#   VGPUCTL_GUEST_NET     first three octets of the guest network (default 10.213.0); host side is .1,
#                         guest i is .(10+i); `prepare` records both in DIR/network for the later commands
#   VGPUCTL_GUEST_CACHE   where build-rootfs.sh caches the root filesystem tarball
#   VGPUCTL_GUEST_HOST_KEYS  start: the folder of the host keys per address (default DIR/host-keys)
#   VGPUCTL_GUEST_PASSWORD   start: root's password in the guest (default: none; key logins only)
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

# The prefix and network `prepare` recorded for DIR win over the environment.
use_network_of() {
    [ -f "$1/network" ] || return 0
    prefix=$(sed -n 's/^prefix=//p' "$1/network")
    net=$(sed -n 's/^net=//p' "$1/network")
    bridge="${prefix}br"
}

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

# Whether process $1 runs (a zombie waiting for its parent to reap it does not).
running() {
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}

# Stop the guest whose folder is $1 (its processes, namespace and link); its files stay.
stop_guest() {
    gdir=$1
    i=${gdir##*/guest}
    ns="$prefix$i"
    if [ -f "$gdir/pid" ]; then
        pid=$(cat "$gdir/pid")
        # unshare holds SIGTERM back while it waits for the guest's PID 1: killing that one ends the guest's
        # PID namespace, everything in it, and then unshare (only while the pid is still the guest's unshare)
        if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q '^unshare '; then
            for child in $(cat "/proc/$pid/task/$pid/children" 2>/dev/null); do kill -9 "$child" 2>/dev/null || true; done
            kill "$pid" 2>/dev/null || true
            n=0
            while running "$pid" && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
            kill -9 "$pid" 2>/dev/null || true
            n=0
            while running "$pid" && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
        fi
        rm -f "$gdir/pid"
    fi
    ip netns del "$ns" 2>/dev/null || true
    ip link del "${ns}h" 2>/dev/null || true
}

down() {
    dir=$1
    [ -d "$dir" ] || return 0
    use_network_of "$dir"
    for gdir in "$dir"/guest*; do
        [ -d "$gdir" ] || continue
        stop_guest "$gdir"
        rm -rf "$gdir"
    done
    # The bridge goes when no guest link is left on it.
    if ip link show "$bridge" >/dev/null 2>&1 && [ -z "$(ip -o link show master "$bridge" 2>/dev/null)" ]; then
        ip link del "$bridge"
    fi
}

# ------------------------------------------------------------------------------- one guest at a time

prepare() {
    dir=$1
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, chroot)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    tarball=$("$here/build-rootfs.sh")
    base=${tarball%.tar.gz}
    if [ ! -d "$base" ]; then
        tmp=$(mktemp -d "$base.XXXXXX")
        tar -C "$tmp" -xzf "$tarball"
        chmod 755 "$tmp"
        mv -T "$tmp" "$base" 2>/dev/null || rm -rf "$tmp"   # another prepare unpacked it first
    fi
    probe=$(mktemp -d "$dir/overlay-probe.XXXXXX")
    mkdir "$probe/upper" "$probe/work" "$probe/root"
    if ! unshare --mount --propagation private mount -t overlay overlay \
        -o "lowerdir=$base,upperdir=$probe/upper,workdir=$probe/work" "$probe/root" 2>"$probe/err"; then
        reason=$(cat "$probe/err")
        rm -rf "$probe"
        die "overlay mounts do not work here ($reason): the guests' root filesystems are overlays"
    fi
    rm -rf "$probe"
    printf 'prefix=%s\nnet=%s\nbase=%s\n' "$prefix" "$net" "$base" > "$dir/network"
    [ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C vgpuctl-sim-controller -f "$dir/id_ed25519"
    touch "$dir/known_hosts"
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add "$bridge" type bridge
        ip addr add "$net.1/24" dev "$bridge"
        ip link set "$bridge" up
    fi
}

# What PID 1 of a guest runs in its own namespaces: its root (an overlay), its identity, then sshd.
# Arguments: root lower upper work hostname address host-key-folder controller-key password-file
GUEST_INIT='
set -eu
root=$1 lower=$2 upper=$3 work=$4 name=$5 addr=$6 keys=$7 authorized=$8 password=$9
hostname "$name"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/run/sshd" "$root/root/.ssh"
echo "$name" > "$root/etc/hostname"
printf "127.0.0.1 localhost
127.0.1.1 %s
" "$name" > "$root/etc/hosts"
cp "$keys/ssh_host_ed25519_key" "$keys/ssh_host_ed25519_key.pub" "$root/etc/ssh/"
chmod 600 "$root/etc/ssh/ssh_host_ed25519_key"
chmod 700 "$root/root/.ssh"
cp "$authorized" "$root/root/.ssh/authorized_keys"
chmod 600 "$root/root/.ssh/authorized_keys"
printf "UsePAM no
PermitRootLogin yes
PasswordAuthentication yes
ListenAddress %s
HostKey /etc/ssh/ssh_host_ed25519_key
"     "$addr" > "$root/etc/ssh/sshd_config.d/vgpuctl-test.conf"
[ ! -s "$password" ] || chroot "$root" chpasswd < "$password"
exec chroot "$root" /bin/sh -c "/usr/sbin/sshd -D -e & wait"
'

check_index() {
    case "$1" in ''|*[!0-9]*) die "guest index must be a number 1..244, not '$1'" ;; esac
    [ "$1" -ge 1 ] && [ "$1" -le 244 ] || die "guest index must be 1..244, not $1"
}

check_hostname() {
    case "$1" in
        ''|-*|*-|*[!A-Za-z0-9-]*) die "not a host name: '$1' (letters, digits and inner hyphens)" ;;
    esac
    [ "${#1}" -le 63 ] || die "not a host name: '$1' (at most 63 characters)"
}

start() {
    dir=$1 i=$2 name=${3:-guest$2}
    check_index "$i"
    check_hostname "$name"
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, chroot)"
    [ -f "$dir/network" ] || die "$dir: not prepared (guestctl.sh prepare DIR first)"
    dir=$(cd "$dir" && pwd)
    use_network_of "$dir"
    base=$(sed -n 's/^base=//p' "$dir/network")
    gdir="$dir/guest$i" ns="$prefix$i" addr="$net.$((10 + i))"
    if [ -f "$gdir/pid" ] && running "$(cat "$gdir/pid")"; then
        echo "guest$i $addr"   # already running
        return 0
    fi
    stop_guest "$gdir"
    mkdir -p "$gdir/upper" "$gdir/work" "$gdir/root"

    # The host key of this address: made once, kept across starts and sessions.
    keys="${VGPUCTL_GUEST_HOST_KEYS:-$dir/host-keys}/$addr"
    if [ ! -s "$keys/ssh_host_ed25519_key" ]; then
        mkdir -p "$keys"
        rm -f "$keys/ssh_host_ed25519_key" "$keys/ssh_host_ed25519_key.pub"
        ssh-keygen -q -t ed25519 -N "" -C "$addr" -f "$keys/ssh_host_ed25519_key"
    fi
    line="$addr $(cut -d' ' -f1,2 "$keys/ssh_host_ed25519_key.pub")"
    grep -qxF "$line" "$dir/known_hosts" 2>/dev/null || echo "$line" >> "$dir/known_hosts"
    password="$gdir/password"
    : > "$password"
    chmod 600 "$password"
    [ -z "${VGPUCTL_GUEST_PASSWORD:-}" ] || printf 'root:%s
' "$VGPUCTL_GUEST_PASSWORD" > "$password"

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
    ip netns exec "$ns" unshare --mount --pid --uts --fork --kill-child --propagation private \
        /bin/sh -c "$GUEST_INIT" guest-init "$gdir/root" "$base" "$gdir/upper" "$gdir/work" "$name" "$addr" \
        "$keys" "$dir/id_ed25519.pub" "$password" > "$gdir/console.log" 2>&1 &
    echo $! > "$gdir/pid"
    wait_for_guest "$dir" "guest$i" "$addr"
    rm -f "$password"
    echo "guest$i $addr"
}

wait_for_guest() {
    dir=$1 name=$2 addr=$3 tries=0
    until ssh -q -i "$dir/id_ed25519" -o BatchMode=yes -o ConnectTimeout=2 \
        -o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes "root@$addr" true </dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -ge 120 ] || ! running "$(cat "$dir/$name/pid")"; then
            tail -n 5 "$dir/$name/console.log" >&2 || true
            die "$name ($addr): sshd did not come up; see $dir/$name/console.log"
        fi
        sleep 0.5
    done
}

stop() {
    dir=$1 i=$2
    check_index "$i"
    use_network_of "$dir"
    stop_guest "$dir/guest$i"
}

remove() {
    dir=$1 i=$2
    check_index "$i"
    use_network_of "$dir"
    stop_guest "$dir/guest$i"
    rm -rf "$dir/guest$i"
}

case "${1:-}" in
    up) [ $# -eq 3 ] || die "usage: $0 up DIR N"; up "$2" "$3" ;;
    down) [ $# -eq 2 ] || die "usage: $0 down DIR"; down "$2" ;;
    prepare) [ $# -eq 2 ] || die "usage: $0 prepare DIR"; prepare "$2" ;;
    start) [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: $0 start DIR I [NAME]"; start "$2" "$3" "${4:-}" ;;
    stop) [ $# -eq 3 ] || die "usage: $0 stop DIR I"; stop "$2" "$3" ;;
    remove) [ $# -eq 3 ] || die "usage: $0 remove DIR I"; remove "$2" "$3" ;;
    *) die "usage: $0 up DIR N | down DIR | prepare DIR | start DIR I [NAME] | stop DIR I | remove DIR I" ;;
esac
