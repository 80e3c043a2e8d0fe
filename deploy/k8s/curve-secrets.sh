#!/bin/sh
# Prints the Kubernetes Secrets of the CURVE keys (docs/security.md), one per role, each with only
# the files that role's pods need — a worker pod can read neither the scheduler's nor the
# kvstore's secret key:
#   tessera keys ./keys                      # once, on an admin host (mode 0700)
#   deploy/k8s/curve-secrets.sh ./keys | kubectl apply -f -
# Pods mount their role's Secret at /var/run/tessera/keys (TESSERA_CURVE_DIR), mode 0400.
set -eu
dir="${1:?usage: curve-secrets.sh KEY_DIR   (made with: tessera keys KEY_DIR)}"
secret() {  # secret NAME FILE... (?FILE: included when the set has it)
  name="$1"; shift
  printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  labels: {app.kubernetes.io/part-of: tessera}\ntype: Opaque\ndata:\n' "$name"
  for f in "$@"; do
    case "$f" in \?*) f="${f#\?}"; [ -r "$dir/$f" ] || continue ;; esac
    [ -r "$dir/$f" ] || { echo "curve-secrets.sh: $dir/$f is missing (make the set with: tessera keys $dir)" >&2; exit 1; }
    printf '  %s: %s\n' "$f" "$(base64 -w0 < "$dir/$f")"
  done
}
# router.key: the K/V events subscribers' public key (key sets made before the router role have
# none; a scheduler started with --kv-events-endpoint and no router key refuses to start).
secret tessera-curve-scheduler scheduler.key_secret frontend.key worker.key '?router.key'
secret tessera-curve-worker worker.key_secret scheduler.key kvstore.key
secret tessera-curve-frontend frontend.key_secret scheduler.key kvstore.key client.key
secret tessera-curve-kvstore kvstore.key_secret frontend.key worker.key
# Per-peer keys (ROLE.d/NAME.key) are not shipped: a Secret holds no directories. Say so.
for f in "$dir"/*.d/*.key; do
  [ -e "$f" ] || continue
  role="$(basename "$(dirname "$f")" .d)"
  if [ -e "$dir/$role.key" ]; then  # the role's own key is shipped; never advise replacing it
    echo "curve-secrets.sh: $f is not in any Secret (a Secret holds no directories); $dir/$role.key is" >&2
  else
    echo "curve-secrets.sh: $f is not in any Secret (a Secret holds no directories): for one $role, copy it to $dir/$role.key" >&2
  fi
done
