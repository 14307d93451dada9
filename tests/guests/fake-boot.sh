#!/bin/sh
# Stands in for `shutdown` and `update-initramfs` in the chroot test guests; the harness installs it under both
# names. The guests share the host's kernel, so a reboot is simulated on what the harness fakes in each guest:
# /sys/module/nouveau (sysfs is not mounted in the chroot guests; the harness creates it when nouveau is to look
# loaded) and /var/lib/fake-boot/boot_id, bind-mounted over /proc/sys/kernel/random/boot_id (what Ansible's
# reboot module compares).
#   update-initramfs   notes whether nouveau was blacklisted in /etc/modprobe.d when the initramfs was made
#   shutdown -r ...    a new boot id; nouveau is loaded again after the "boot" unless the last initramfs was
#                      made with nouveau blacklisted (as on a real guest, where the initramfs loads it early)
# Every call is logged in /var/log/vgpuctl-fake-events. The boot id is rewritten in place: a bind mount follows
# the inode, not the name.
set -eu
STATE=/var/lib/fake-boot
EVENTS=/var/log/vgpuctl-fake-events

case "${0##*/}" in
    update-initramfs)
        if grep -qs '^blacklist nouveau' /etc/modprobe.d/*.conf; then
            touch "$STATE/initramfs-without-nouveau"
        else
            rm -f "$STATE/initramfs-without-nouveau"
        fi
        echo "initramfs" >> "$EVENTS"
        ;;
    shutdown)
        echo "reboot" >> "$EVENTS"
        if [ -f "$STATE/initramfs-without-nouveau" ]; then
            rm -rf /sys/module/nouveau
        fi
        cat /proc/sys/kernel/random/uuid > "$STATE/boot_id"
        ;;
    *)
        echo "fake-boot: called as ${0##*/}" >&2
        exit 2
        ;;
esac
