#!/usr/bin/env bash
# package_test.sh BUILD_DIR VERSION WORK_DIR [MODEL] (tests/integration/package/CMakeLists.txt).
# Builds tessera_VERSION_ARCH.deb and tessera-client-dev_VERSION_ARCH.deb with cpack, checks
# what they hold, runs the programs from an extracted copy, rates the installed units, and
# installs/purges the package in a chroot when an overlay of / can be mounted, then boots
# systemd over such a root and starts the units there (systemd_boot_test.sh, with MODEL).
set -euo pipefail
build=$1 version=$2 work=$3 model=${4:-}

for tool in cpack dpkg-deb dpkg-shlibdeps systemd-analyze; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (Debian packages cmake, dpkg-dev, systemd)"; exit 77
  fi
done

fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
arch=$(dpkg --print-architecture)

# --- cpack ------------------------------------------------------------------------------------
cpack --config "$build/CPackConfig.cmake" -B "$work/out" > "$work/cpack.log" 2>&1 \
  || { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$work/out/tessera_${version}_${arch}.deb
dev=$work/out/tessera-client-dev_${version}_${arch}.deb
[[ -f $deb ]] || { ls "$work/out"; fail "no $deb"; }
[[ -f $dev ]] || { ls "$work/out"; fail "no $dev"; }

# --- control fields ---------------------------------------------------------------------------
field() { dpkg-deb -f "$1" "$2"; }
[[ $(field "$deb" Package) == tessera ]] || fail "Package: $(field "$deb" Package)"
[[ $(field "$deb" Version) == "$version" ]] || fail "Version: $(field "$deb" Version)"
[[ $(field "$deb" Architecture) == "$arch" ]] || fail "Architecture: $(field "$deb" Architecture)"
[[ -n $(field "$deb" Maintainer) ]] || fail "no Maintainer"
depends=$(field "$deb" Depends)
for d in adduser libc6 libstdc++6 libzmq5; do
  [[ $depends == *"$d"* ]] || fail "Depends lacks $d: $depends"
done
[[ $(field "$dev" Package) == tessera-client-dev ]] || fail "client Package: $(field "$dev" Package)"
[[ $(field "$dev" Depends) == *libzmq5* ]] || fail "client Depends: $(field "$dev" Depends)"
info=$(dpkg-deb -I "$deb")
for s in postinst prerm postrm conffiles; do
  grep -q " $s " <<<"$info" || fail "no $s in the control archive: $info"
done
[[ $(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles) == /etc/tessera/tessera.conf ]] \
  || fail "conffiles is not /etc/tessera/tessera.conf"

# --- file lists -------------------------------------------------------------------------------
list() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|'; }
files=$(list "$deb")
for f in /usr/bin/tessera /usr/bin/tessera-frontend /usr/bin/tessera-scheduler /usr/bin/tessera-worker \
         /usr/bin/tessera-kvstore /etc/tessera/tessera.conf /usr/share/doc/tessera/README.md \
         /usr/share/doc/tessera/operations.md /usr/share/doc/tessera/deploy/oci/Containerfile \
         /usr/lib/systemd/system/tessera-frontend.service /usr/lib/systemd/system/tessera-scheduler.service \
         /usr/lib/systemd/system/tessera-worker@.service /usr/lib/systemd/system/tessera-kvstore.service \
         /usr/lib/cmake/Tessera/TesseraConfig.cmake; do
  grep -qxF "$f" <<<"$files" || fail "$f is not in the package"
done
stray=$(grep -vE '^/(usr/(bin|lib/systemd/system|lib/cmake/Tessera|share/doc/tessera)|etc/tessera)(/|$)|^/(usr|usr/lib|usr/lib/systemd|usr/lib/cmake|usr/share|usr/share/doc|etc)?/?$' <<<"$files" || true)
[[ -z $stray ]] || fail "unexpected paths in the package: $stray"
devfiles=$(list "$dev")
for f in /usr/include/tessera/client/client.h /usr/lib/pkgconfig/tessera-client.pc \
         /usr/lib/cmake/TesseraClient/TesseraClientConfig.cmake /usr/lib/libtessera_client.a; do
  grep -qxF "$f" <<<"$devfiles" || fail "$f is not in the client package"
done
grep -q '^/usr/lib/libtessera_client\.so' <<<"$devfiles" || fail "no libtessera_client.so in the client package"

# --- the extracted programs -------------------------------------------------------------------
root=$work/root
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/tessera-scheduler" --help > "$work/help.txt" || fail "installed tessera-scheduler --help"
grep -q -- '--worker-endpoint' "$work/help.txt" || fail "tessera-scheduler --help lacks --worker-endpoint"
[[ $("$root/usr/bin/tessera-scheduler" --version) == *"$version"* ]] || fail "tessera-scheduler --version"
"$root/usr/bin/tessera" keys --log-level warn "$work/keys" || fail "installed tessera keys"
for k in scheduler kvstore frontend worker client router; do
  [[ -s $work/keys/$k.key && -s $work/keys/$k.key_secret ]] || fail "tessera keys made no $k pair"
done

# --- the installed units ----------------------------------------------------------------------
units=$root/usr/lib/systemd/system
for u in "$units"/*.service; do
  name=$(basename "$u")
  grep -q '^ExecStart=/usr/bin/tessera-' "$u" || fail "$name: ExecStart is not /usr/bin/tessera-*"
  out=$(systemd-analyze security --offline=true "$u" 2>&1) || true
  level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' <<<"$out")
  [[ -n $level ]] || { echo "$out"; fail "$name: no exposure level from systemd-analyze security"; }
  echo "$name: exposure $level"
  awk -v l="$level" 'BEGIN { exit !(l <= 4.0) }' || { echo "$out"; fail "$name rates $level > 4.0"; }
  # verify needs the ExecStart binary on this host: a copy naming the extracted one.
  sed "s|/usr/bin/tessera|$root/usr/bin/tessera|g" "$u" > "$work/$name"
  systemd-analyze verify --man=no "$work/$name" > "$work/verify.log" 2>&1 \
    || { cat "$work/verify.log"; fail "systemd-analyze verify $name"; }
done

# --- dpkg -i / --purge in a chroot over an overlay of / ----------------------------------------
# Runs the maintainer scripts for real (the host's / stays untouched: writes go to the upper
# layer). Needs root and mount rights; elsewhere this part is skipped with a message.
ov=$work/overlay
mkdir -p "$ov/upper" "$ov/work" "$ov/merged"
if [[ $(id -u) != 0 ]] || ! unshare -m true 2>/dev/null; then
  echo "NOTE: not root or no mount namespace: dpkg -i in a chroot not tried"
  echo "PASS (without the chroot install)"; exit 0
fi
cp "$deb" "$work/tessera.deb"
cat > "$work/in-chroot.sh" <<'CHROOT'
set -euo pipefail
fail() { echo "FAIL (chroot): $*" >&2; exit 1; }
! getent passwd tessera >/dev/null || { echo "NOTE: this host already has a tessera user"; }
dpkg -i /deb/tessera.deb
[[ $(dpkg-query -W -f='${Status}' tessera) == "install ok installed" ]] || fail "dpkg status"
getent passwd tessera >/dev/null || fail "postinst made no tessera user"
[[ $(stat -c '%U:%G %a' /var/lib/tessera) == "tessera:tessera 750" ]] || fail "/var/lib/tessera: $(stat -c '%U:%G %a' /var/lib/tessera)"
[[ $(stat -c '%U %a' /etc/tessera/keys) == "root 700" ]] || fail "/etc/tessera/keys: $(stat -c '%U %a' /etc/tessera/keys)"
[[ -s /etc/tessera/keys/scheduler.key_secret ]] || fail "postinst made no keys"
before=$(md5sum /etc/tessera/keys/scheduler.key_secret)
/usr/bin/tessera-scheduler --version >/dev/null || fail "tessera-scheduler --version"
for u in /usr/lib/systemd/system/tessera-*.service; do
  systemd-analyze verify --man=no "$u" || fail "systemd-analyze verify $u"
done
# A reinstall (as an upgrade runs the scripts) keeps the keys and the user.
dpkg -i /deb/tessera.deb
[[ $(md5sum /etc/tessera/keys/scheduler.key_secret) == "$before" ]] || fail "a reinstall replaced the keys"
dpkg --purge tessera
[[ ! -e /usr/bin/tessera-scheduler && ! -e /var/lib/tessera && ! -e /etc/tessera/keys ]] \
  || fail "purge left files behind"
echo "chroot install, reinstall, purge: ok"
CHROOT
mkdir -p "$work/debdir" && mv "$work/tessera.deb" "$work/debdir/"
set +e
unshare -m bash -c '
    set -e
    m=$1/merged
    mount -t overlay overlay -o "lowerdir=/,upperdir=$1/upper,workdir=$1/work" "$m" || exit 99
    mount --bind /dev "$m/dev"; mount -t proc proc "$m/proc"
    mkdir -p "$m/deb"; mount --bind "$2" "$m/deb"; cp "$3" "$m/deb/in-chroot.sh"
    chroot "$m" bash /deb/in-chroot.sh' _ "$ov" "$work/debdir" "$work/in-chroot.sh" > "$work/chroot.log" 2>&1
rc=$?
set -e
cat "$work/chroot.log"
if [[ $rc == 99 ]]; then
  echo "NOTE: could not mount an overlay of / here: dpkg -i in a chroot not tried"
elif [[ $rc != 0 ]]; then
  fail "install in a chroot (exit $rc)"
fi
rm -rf "$ov"

# --- systemctl start on a booted systemd ---------------------------------------------------
if [[ -n $model && -f $model ]]; then
  set +e
  bash "$(dirname "$0")/systemd_boot_test.sh" "$work" "$deb" "$model"
  rc=$?
  set -e
  [[ $rc == 0 || $rc == 77 ]] || fail "systemctl start of the installed units"
else
  echo "NOTE: no model ($model): the booted systemd test is skipped"
fi
echo PASS
