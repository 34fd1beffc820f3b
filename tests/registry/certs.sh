#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# certs.sh DIR: a test CA and the certificates the registry's TLS tests use,
# made with the openssl command line (P-256 keys, valid two days):
#   ca.pem ca.key              the CA etcd and the clients trust
#   server.pem server.key      etcd's: names IP 127.0.0.1 and DNS localhost
#   client.pem client.key      a client's, CN root, signed by the CA
#   other-ca.pem other.pem other.key   another CA and a client it signed
set -eu
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # ca NAME CN
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # leaf NAME CN CA EXTENSIONS
    key "$1.key"
    openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2"
    printf '%s\n' "$4" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" \
        -days 2 -extfile "$1.ext" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
ca ca tpx-test-ca
leaf server etcd ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
leaf client root ca "extendedKeyUsage=clientAuth"
ca other-ca tpx-other-ca
leaf other root other-ca "extendedKeyUsage=clientAuth"
chmod 600 ./*.key
