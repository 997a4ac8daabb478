#!/bin/sh
# /init of the guest's initramfs (testbed/endpoints/vm/bootfiles.py packs it with klibc's shell
# and tools and the modules in /modules, numbered in the order they load). No udev: load the
# modules, wait for the root device in devtmpfs, mount it, move /dev there and hand over to the
# guest's init (init= on the kernel command line: guest-init.sh) with klibc's run-init.
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
root=/dev/vda
init=/sbin/init
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    root=*) root=${arg#root=} ;;
    init=*) init=${arg#init=} ;;
  esac
done
umount /proc
for m in /modules/*.ko; do
  insmod "$m" || echo "ntg-initramfs: could not load $m" >/dev/console
done
n=0
while [ ! -b "$root" ] && [ $n -lt 300 ]; do
  sleep 0.05
  n=$((n + 1))
done
if ! mount -t ext4 -o rw "$root" /root; then
  echo "ntg-initramfs: cannot mount the root file system $root" >/dev/console
  while :; do sleep 3600; done
fi
mount -o move /dev /root/dev
exec run-init /root "$init"
echo "ntg-initramfs: run-init /root $init failed" >/dev/console
while :; do sleep 3600; done
