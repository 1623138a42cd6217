#!/usr/bin/env bash
# Makes what tls+tcp:// needs, with openssl, into DIR (README "Security"):
#   ca.pem, ca.key          a CA of your own (keep ca.key off the daemon's machine)
#   server.pem, server.key  the daemon's certificate, for the DNS names given
#   client.pem, client.key  a client's certificate (for --tls-verify-clients)
# Keys are P-256 EC, unencrypted, readable by their owner only. mbed TLS (nng's
# TLS engine) matches DNS names only, never IP addresses: clients dial a name
# the certificate carries, or give --tls-server-name.
#
#   scripts/tls-certs.sh [--days N] [--client NAME] DIR HOST [HOST...]
#   e.g. scripts/tls-certs.sh ~/dqnd-tls gpu1.example localhost
set -euo pipefail
days=825 client="dqnd client"
while [ $# -gt 0 ]; do
  case $1 in
    --days) days=$2; shift 2;;
    --client) client=$2; shift 2;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    -*) echo "tls-certs.sh: unknown option $1 (see --help)" >&2; exit 2;;
    *) break;;
  esac
done
[ $# -ge 2 ] || { echo "usage: tls-certs.sh [--days N] [--client NAME] DIR HOST [HOST...]" >&2; exit 2; }
dir=$1; shift
san=$(printf 'DNS:%s,' "$@"); san=${san%,}
mkdir -p "$dir"; cd "$dir"
umask 077
K=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${K[@]}" -keyout ca.key -out ca.pem -days "$days" -subj "/CN=dqnd CA" 2>/dev/null
printf 'subjectAltName=%s\n' "$san" > server.ext
openssl req "${K[@]}" -keyout server.key -out server.csr -subj "/CN=$1" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days "$days" \
  -extfile server.ext 2>/dev/null
openssl req "${K[@]}" -keyout client.key -out client.csr -subj "/CN=$client" 2>/dev/null
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days "$days" 2>/dev/null
rm -f server.csr client.csr server.ext ca.srl
chmod 644 ca.pem server.pem client.pem
echo "in $dir: ca.pem ca.key server.pem server.key ($san) client.pem client.key ('$client'), valid $days days"
