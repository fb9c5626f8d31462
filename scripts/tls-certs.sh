#!/usr/bin/env bash
# Makes a private CA, a server certificate for a P4Runtime switch (BMv2's --grpc-server-cert/-key) and a
# client certificate for the controller (finsy's GRPCCredentialsTLS), for anyone who exposes P4Runtime
# beyond this machine's loopback (docs/guide.md, "P4Runtime over TLS"). Usage: scripts/tls-certs.sh DIR [HOST-IP]
# (HOST-IP: the address the switch is reached at, default 127.0.0.1). Needs openssl.
set -euo pipefail
dir=${1:?usage: scripts/tls-certs.sh DIR [HOST-IP]}
ip=${2:-127.0.0.1}
mkdir -p "$dir" && cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "tls-certs: $* failed" >&2; exit 1; }; }
quiet openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 365 -subj /CN=pcnlab-ca
for who in server client; do
  quiet openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" -subj "/CN=pcnlab-$who"
  printf 'subjectAltName=IP:%s,DNS:localhost\n' "$ip" >"$who.ext"
  quiet openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$who.pem" -days 365 \
    -extfile "$who.ext"
  rm -f "$who.csr" "$who.ext"
done
chmod 600 ./*.key
echo "tls-certs: ca.pem, server.pem/.key, client.pem/.key in $dir"
