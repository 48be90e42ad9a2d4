#!/usr/bin/env bash
# Makes the certificates of one Downpour job with openssl:
#   DIR/ca.pem, ca.key        the job's CA (keep ca.key off the job's hosts)
#   DIR/server.pem, server.key  servers' certificate (serverAuth + clientAuth)
#   DIR/client.pem, client.key  workers' certificate (clientAuth)
#   DIR/token                 a random bearer token
#   with --ps=S --workers=W, also one certificate per task, its name the
#   subject's Common Name: DIR/ps-<k>.pem/.key (k < S, serverAuth +
#   clientAuth) and DIR/worker-<i>.pem/.key (i < W, clientAuth). A server
#   takes pushes for worker i only from worker-<i> (rpc/peer_identity.h;
#   with --require_task_certificates, from nothing else).
# DIR is made mode 0700 and every file in it 0600.
# Subject alternative names always include localhost, 127.0.0.1 and ::1; add
# the job's hosts and IPs as further arguments:
#   bash deploy/make_certs.sh certs/ ps0.example.org 198.18.0.5
# Then: ps_server --tls_cert=certs/server.pem --tls_key=certs/server.key \
#         --tls_ca=certs/ca.pem --auth_token_file=certs/token ...
set -euo pipefail
NUM_PS=0 NUM_WORKERS=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --ps=*) NUM_PS=${1#--ps=} ;;
    --workers=*) NUM_WORKERS=${1#--workers=} ;;
    *) echo "make_certs: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -lt 1 || ! $NUM_PS =~ ^[0-9]+$ || ! $NUM_WORKERS =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [--ps=S] [--workers=W] DIR [HOST_OR_IP ...]" >&2
  exit 2
fi
DIR=$1; shift
command -v openssl >/dev/null || { echo "make_certs: openssl not found (apt-get install openssl)" >&2; exit 1; }
# Everything it writes is the owner's only: the folder 0700, files 0600.
umask 077
mkdir -p "$DIR"
chmod 700 "$DIR"
DAYS=${DAYS:-825}

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for h in "$@"; do
  if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san+=",IP:$h"; else san+=",DNS:$h"; fi
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$DIR/ca.key" -out "$DIR/ca.pem" -days "$DAYS" \
  -subj "/CN=downpour-job-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

issue() {  # file name, extendedKeyUsage, Common Name
  local name=$1 eku=$2 cn=$3 ext
  ext=$(mktemp)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$san" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$DIR/$name.key" -out "$DIR/$name.csr" -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
    -CAcreateserial -out "$DIR/$name.pem" -days "$DAYS" -extfile "$ext" 2>/dev/null
  rm -f "$ext" "$DIR/$name.csr"
}
issue server "serverAuth,clientAuth" downpour-server
issue client "clientAuth" downpour-client
for ((k = 0; k < NUM_PS; ++k)); do issue "ps-$k" "serverAuth,clientAuth" "ps-$k"; done
for ((i = 0; i < NUM_WORKERS; ++i)); do issue "worker-$i" "clientAuth" "worker-$i"; done
rm -f "$DIR/ca.srl"
openssl rand -hex 32 > "$DIR/token"
chmod 600 "$DIR"/*.pem "$DIR"/*.key "$DIR/token"
echo "make_certs: wrote CA, server and client certificates, $NUM_PS server and $NUM_WORKERS worker task certificates and a token to $DIR (SAN: $san)"
