#!/usr/bin/env bash
# The webhook serving certificate without cert-manager: a CA and a certificate for the webhook
# Service, written to DIR (default ./webhook-certs), then (with --apply) stored as Secret
# valkey-operator-webhook-cert in NAMESPACE. Prints the caBundle to give the chart
# (webhook.caBundle) or to put in webhooks/validating.yaml and the two converting CRDs.
# Usage: certs/generate.sh [--namespace NAMESPACE] [--dir DIR] [--days DAYS] [--apply]
set -euo pipefail
ns=valkey-operator-system dir=./webhook-certs days=365 apply=0
while [ $# -gt 0 ]; do
  case $1 in
    --namespace) ns=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --days) days=$2; shift 2 ;;
    --apply) apply=1; shift ;;
    *) echo "usage: $0 [--namespace NAMESPACE] [--dir DIR] [--days DAYS] [--apply]" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
svc=valkey-operator-webhook
if ! [ -f "$dir/ca.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=valkey-operator-webhook-ca" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
fi
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$svc.$ns.svc" \
  -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "$svc" "$svc" "$ns" "$svc" "$ns" "$svc" "$ns" > "$dir/tls.ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days "$days" -extfile "$dir/tls.ext" -out "$dir/tls.crt" 2>/dev/null
rm -f "$dir/tls.csr" "$dir/tls.ext"
if [ "$apply" = 1 ]; then
  kubectl -n "$ns" create secret tls valkey-operator-webhook-cert --cert="$dir/tls.crt" \
    --key="$dir/tls.key" --dry-run=client -o yaml | kubectl apply -f - >&2
fi
echo "certificate for $svc.$ns.svc in $dir (valid $days days; rerun before then: the CA is kept)" >&2
base64 -w0 < "$dir/ca.crt"; echo
