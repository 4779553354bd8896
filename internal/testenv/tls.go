package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// TLS makes a server started by Start accept TLS (ssl = on) with a server
// certificate signed by a throwaway CA generated at start.
type TLS struct {
	// Hosts are the names and IP addresses the server certificate is issued
	// for. Empty: 127.0.0.1 and localhost, which verify-full accepts for
	// URL. Give another name to get a certificate that does not match the
	// host clients connect to.
	Hosts []string
}

// CA file name in the server's temporary directory.
const caFile = "ca.crt"

// setupTLS writes the CA certificate (for clients, in the temp dir) and the
// server certificate and key (in the data directory, owned by the server's
// user) and returns the postgresql.conf settings that use them.
func (p *PG) setupTLS(o *TLS) ([][2]string, error) {
	hosts := o.Hosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tidemark testenv CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: server key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testenv: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	pemOf := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	if err := p.writeFile(caFile, pemOf("CERTIFICATE", caDER)); err != nil {
		return nil, err
	}
	if err := p.writeFile("data/server.crt", pemOf("CERTIFICATE", leafDER)); err != nil {
		return nil, err
	}
	if err := p.writeFile("data/server.key", pemOf("EC PRIVATE KEY", keyDER)); err != nil {
		return nil, err
	}
	p.CAFile = filepath.Join(p.root, caFile)
	return [][2]string{{"ssl", "on"}, {"ssl_cert_file", "server.crt"}, {"ssl_key_file", "server.key"}}, nil
}

// TLSURL returns a connection URL for database db as the superuser, with
// the given sslmode and, for a TLS server, sslrootcert = the test CA.
func (p *PG) TLSURL(db, sslmode string) string {
	u := strings.Replace(p.URL(db), "sslmode=disable", "sslmode="+url.QueryEscape(sslmode), 1)
	if p.CAFile != "" {
		u += "&sslrootcert=" + url.QueryEscape(p.CAFile)
	}
	return u
}
