#!/bin/bash
# PID 1 of the ntg-testbed guest (testbed/endpoints/vm/image.py installs it as
# /usr/local/sbin/ntg-init). No systemd: mount what the engine needs, name and address the NICs
# the kernel command line lists (ntg.nic=MAC,NAME,MTU[,ADDRESS...]), start sshd, print the ready
# line, then reap orphans. Nothing else runs, so a TCG boot takes seconds and the guest sends
# nothing of its own (IPv6 off: no router solicitations, no MLD).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc 2>/dev/null  # the initramfs may have moved them here already
mount -t sysfs sysfs /sys 2>/dev/null
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
mount -o remount,rw /
hostname ntg-vm
modprobe -q -a virtio_net af_packet 2>/dev/null
for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do [ -e "$f" ] && echo 1 >"$f"; done
echo 0 >/proc/sys/net/ipv4/ip_forward
ip link set lo up
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    ntg.nic=*)
      IFS=, read -r -a nic <<<"${arg#ntg.nic=}"
      dev=
      for d in /sys/class/net/*; do
        [ "$(cat "$d/address")" = "${nic[0]}" ] && dev=${d##*/}
      done
      if [ -z "$dev" ]; then echo "ntg-init: no NIC with MAC ${nic[0]}" >/dev/console; continue; fi
      ip link set "$dev" name "${nic[1]}"
      ip link set "${nic[1]}" mtu "${nic[2]}"
      for a in "${nic[@]:3}"; do ip addr add "$a" dev "${nic[1]}"; done
      ip link set "${nic[1]}" up
      ;;
  esac
done
mkdir -p /run/sshd
# -r: a connection's sshd is a fork of this one, not a new program (faster logins under TCG)
/usr/sbin/sshd -r -E /run/sshd.log
echo "ntg-init: ready" >/dev/console
trap : CHLD
while :; do wait; sleep 1; done
