#!/usr/bin/env bash
# systemd_boot_test.sh WORK_DIR DEB MODEL (called by package_test.sh).
# The .deb on a booted systemd: an overlay of the host's root (writes go to WORK_DIR; the host
# stays untouched) becomes the root of new mount, PID and network namespaces, the package is
# installed there with dpkg (its maintainer scripts run), systemd boots as PID 1, and then
# `systemctl start` runs the units as installed: scheduler, kvstore, a worker on MODEL and the
# frontend, a completion through the frontend, `systemctl stop` (a drain) ending cleanly.
# Exit 0 passed, 1 failed, 77 when this host cannot do it (needs root, mount and PID
# namespaces, systemd; not in a CI container without CAP_SYS_ADMIN).
set -uo pipefail
work=$1 deb=$2 model=$3
note() { echo "NOTE: $*: the booted systemd test is skipped"; exit 77; }
[[ $(id -u) == 0 ]] || note "not root"
[[ -x /lib/systemd/systemd ]] || note "no /lib/systemd/systemd"
unshare -m -p -n -f --mount-proc true 2>/dev/null || note "no mount/PID/network namespaces"

ov=$work/boot
rm -rf "$ov" && mkdir -p "$ov/upper" "$ov/work" "$ov/root" "$ov/in"
cp "$deb" "$ov/in/tessera.deb" && cp "$model" "$ov/in/model.gguf"
cat > "$ov/in/setup.sh" <<'SETUP'
set -e
m=$1
mount -t overlay overlay -o "lowerdir=/,upperdir=$2/upper,workdir=$2/work" "$m" || exit 99
mount --bind /dev "$m/dev"; mount -t proc proc "$m/proc"; mount -t sysfs sysfs "$m/sys"
mount -t tmpfs tmpfs "$m/run"; mount -t tmpfs tmpfs "$m/tmp"
mkdir -p "$m/in" && mount --bind "$2/in" "$m/in"
ip link set lo up
chroot "$m" dpkg -i /in/tessera.deb > "$2/in/dpkg.log" 2>&1
cd "$m" && mkdir -p oldroot && pivot_root . oldroot && umount -l /oldroot && rmdir /oldroot
mount --make-rshared /
exec env container=tessera-test /lib/systemd/systemd --system --unit=basic.target --log-target=null
SETUP
unshare -m -p -n -f --mount-proc bash "$ov/in/setup.sh" "$ov/root" "$ov" > "$ov/boot.log" 2>&1 &
outer=$!
cleanup() {
  local init
  init=$(pgrep -P "$outer" 2>/dev/null) && kill -KILL "$init" 2>/dev/null
  wait "$outer" 2>/dev/null
  rm -rf "$ov"
}
trap cleanup EXIT

# systemd is the child of unshare once setup.sh execs it.
init=""
for _ in $(seq 200); do
  init=$(pgrep -P "$outer" -x systemd) && break
  kill -0 "$outer" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $init ]]; then
  cat "$ov/boot.log" "$ov/in/dpkg.log" 2>/dev/null
  wait "$outer"; rc=$?
  [[ $rc == 99 ]] && note "cannot mount an overlay of / here"
  echo "FAIL: systemd did not start (setup exit $rc)"; exit 1
fi
inside() { nsenter -t "$init" -m -p -n -r -w "$@"; }
for _ in $(seq 200); do
  inside test -S /run/systemd/private && break
  sleep 0.1
done
state=$(inside systemctl is-system-running --wait 2>&1)
echo "booted: $state"
fail() {
  echo "FAIL: $*"
  for u in tessera-scheduler tessera-kvstore tessera-worker@0 tessera-frontend; do
    inside systemctl status --no-pager -n 20 "$u" 2>&1 | head -30
  done
  exit 1
}

inside install -d -o tessera -g tessera /var/lib/tessera/models || fail "models directory"
inside install -o tessera -g tessera -m 0640 /in/model.gguf /var/lib/tessera/models/model.gguf || fail "model"
inside sh -c 'printf "TESSERA_MODEL=/var/lib/tessera/models/model.gguf\nTESSERA_WORKER_SCHEDULER=tcp://127.0.0.1:8101\n" > /etc/tessera/worker.env
          printf "TESSERA_MODEL=/var/lib/tessera/models/model.gguf\nTESSERA_SCHEDULERS=tcp://127.0.0.1:8100\n" > /etc/tessera/frontend.env' \
  || fail "env files"
inside systemctl start tessera-scheduler tessera-kvstore tessera-worker@0 tessera-frontend || fail "systemctl start"
ready=""
for _ in $(seq 300); do
  ready=$(inside curl -sf http://127.0.0.1:8000/ready 2>/dev/null) && break
  sleep 0.1
done
[[ -n $ready ]] || fail "the frontend never answered /ready 200"
answer=$(inside curl -sf http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \
  -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}') || fail "completion request"
grep -q '"completion_tokens":8' <<<"$answer" || fail "completion: $answer"
echo "completion through the installed units: $answer"
for u in tessera-scheduler tessera-kvstore tessera-worker@0 tessera-frontend; do
  [[ $(inside systemctl show -P User "$u") == tessera ]] || fail "$u does not run as tessera"
  [[ $(inside systemctl is-active "$u") == active ]] || fail "$u is not active"
done
inside systemctl stop tessera-frontend tessera-worker@0 || fail "systemctl stop"
for u in tessera-frontend tessera-worker@0; do
  result=$(inside systemctl show -P Result "$u")
  [[ $result == success ]] || fail "$u stopped with Result=$result (a drain ends with exit 0)"
done
echo "systemctl start/stop on a booted systemd: ok"
