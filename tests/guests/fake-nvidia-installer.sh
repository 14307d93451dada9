#!/bin/sh
# Stands in for NVIDIA-Linux-x86_64-<version>-grid.run in the guest tests. Like the real installer it is
# run as `sh FILE --silent [--dkms] [...]`; it records its arguments and installs:
#   /usr/bin/nvidia-smi      prints vGPU output from /etc/fake-nvidia/vgpu.conf (COUNT, PROFILE, NVLINK,
#                            written by the test harness: that is the hypervisor's side of the guest)
#                            and the licence state nvidia-gridd left in /var/lib/fake-nvidia/licensed
#   /usr/bin/nvidia-gridd    licenses the guest when it starts with FeatureType 1, 2 or 4 in
#                            /etc/nvidia/gridd.conf and a *.tok file in /etc/nvidia/ClientConfigToken
#   /etc/init.d/nvidia-gridd and nvidia-gridd.service (the test guests have no systemd)
#   /etc/nvidia/gridd.conf.template
# Like nvidia-installer 550 and later, it refuses to install while nouveau is loaded (a loaded module has
# /sys/module/nouveau/initstate; the test harness fakes it). Each run is logged in /var/log/vgpuctl-fake-events.
set -eu
VERSION=@VERSION@
EVENTS=/var/log/vgpuctl-fake-events

if [ -e /sys/module/nouveau/initstate ]; then
    echo "installer refused: nouveau loaded" >> "$EVENTS"
    echo "ERROR: The Nouveau kernel driver is currently in use by your system. This driver is incompatible" \
        "with the NVIDIA driver, and must be disabled before proceeding." >&2
    exit 1
fi

mkdir -p /var/lib/fake-nvidia /etc/nvidia /etc/fake-nvidia /usr/bin /etc/init.d /lib/systemd/system
echo "$*" >> /var/lib/fake-nvidia/installer.args
echo "installer $VERSION" >> "$EVENTS"
echo "$VERSION" > /var/lib/fake-nvidia/version

cat > /usr/bin/nvidia-smi <<'SMI'
#!/bin/sh
COUNT=1 PROFILE=A100-40C NVLINK=0
[ -r /etc/fake-nvidia/vgpu.conf ] && . /etc/fake-nvidia/vgpu.conf
VERSION=$(cat /var/lib/fake-nvidia/version)
if [ -f /var/lib/fake-nvidia/licensed ]; then
    LICENSE="Licensed (Expiry: 2099-1-1 0:0:0 GMT)"
else
    LICENSE="Unlicensed (Unrestricted)"
fi
gpus() { i=0; while [ "$i" -lt "$COUNT" ]; do echo "$i"; i=$((i + 1)); done; }
case "$*" in
    "--query-gpu=driver_version,name --format=csv,noheader")
        for i in $(gpus); do echo "$VERSION, NVIDIA $PROFILE"; done ;;
    "--query-gpu=name --format=csv,noheader")
        for i in $(gpus); do echo "NVIDIA $PROFILE"; done ;;
    "-L")
        for i in $(gpus); do echo "GPU $i: NVIDIA $PROFILE (UUID: GPU-fake-$i)"; done ;;
    "-q")
        echo "==============NVSMI LOG=============="
        echo "Driver Version                            : $VERSION"
        echo "Attached GPUs                             : $COUNT"
        for i in $(gpus); do
            echo "GPU 00000000:0$((i + 2)):00.0"
            echo "    Product Name                          : NVIDIA $PROFILE"
            echo "    vGPU Software Licensed Product"
            echo "        Product Name                      : NVIDIA Virtual Compute Server"
            echo "        License Status                    : $LICENSE"
        done ;;
    "topo -m")
        printf '\t'; for i in $(gpus); do printf 'GPU%s\t' "$i"; done; echo
        for i in $(gpus); do
            printf 'GPU%s\t' "$i"
            for j in $(gpus); do
                if [ "$i" = "$j" ]; then printf 'X\t'; elif [ "$NVLINK" = 1 ]; then printf 'NV12\t'; else printf 'PIX\t'; fi
            done
            echo
        done ;;
    *) echo "fake nvidia-smi: unsupported arguments: $*" >&2; exit 2 ;;
esac
SMI

cat > /usr/bin/nvidia-gridd <<'GRIDD'
#!/bin/sh
state=/var/lib/fake-nvidia/licensed
rm -f "$state"
feature=$(sed -n 's/^FeatureType=//p' /etc/nvidia/gridd.conf 2>/dev/null | tail -n 1)
case "$feature" in
    1|2|4) if ls /etc/nvidia/ClientConfigToken/*.tok >/dev/null 2>&1; then date > "$state"; fi ;;
esac
trap 'rm -f "$state"; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
GRIDD

cat > /etc/init.d/nvidia-gridd <<'INIT'
#!/bin/sh
### BEGIN INIT INFO
# Provides:          nvidia-gridd
# Required-Start:    $remote_fs $network
# Required-Stop:     $remote_fs $network
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: NVIDIA vGPU licensing daemon (test stand-in)
### END INIT INFO
PIDFILE=/run/nvidia-gridd.pid
running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
case "$1" in
    start) running || start-stop-daemon --start --background --make-pidfile --pidfile "$PIDFILE" --startas /usr/bin/nvidia-gridd ;;
    stop)
        if running; then
            pid=$(cat "$PIDFILE"); kill "$pid"
            while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
        fi
        rm -f "$PIDFILE" ;;
    restart|force-reload) "$0" stop; "$0" start ;;
    status) if running; then echo "nvidia-gridd is running"; exit 0; else echo "nvidia-gridd is not running"; exit 3; fi ;;
    *) echo "usage: $0 {start|stop|restart|status}" >&2; exit 2 ;;
esac
INIT

cat > /lib/systemd/system/nvidia-gridd.service <<'UNIT'
[Unit]
Description=NVIDIA Grid Daemon
[Service]
ExecStart=/usr/bin/nvidia-gridd
[Install]
WantedBy=multi-user.target
UNIT

cat > /etc/nvidia/gridd.conf.template <<'TEMPLATE'
# Template for the NVIDIA licensing client
FeatureType=0
TEMPLATE

chmod 755 /usr/bin/nvidia-smi /usr/bin/nvidia-gridd /etc/init.d/nvidia-gridd
