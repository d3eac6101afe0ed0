// Package devtls makes a development certificate authority and the
// certificates it signs, in Go, so the local stack runs its internal hops
// over TLS without an openssl step. Its keys sit in plain files: it is for
// development machines only; production certificates come from the
// cluster's issuer (cert-manager in deploy/k8s).
package devtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a development certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CAFile and CAKeyFile are the CA's file names inside its directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// LoadOrCreateCA loads the CA kept in dir, or makes one there (valid for
// ten years) if dir holds none yet, so every run of the local stack trusts
// the same root.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err == nil {
		keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
		if err != nil {
			return nil, fmt.Errorf("read CA key: %w", err)
		}
		return parseCA(certPEM, keyPEM)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("CA directory: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "paysched development CA", Organization: []string{"paysched (development only)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key}
	if err := writePair(dir, CAFile, CAKeyFile, der, key); err != nil {
		return nil, err
	}
	return ca, nil
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("CA files hold no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue signs a certificate for name, valid for the hosts (DNS names or IP
// addresses) as a server and as a client, and writes it to dir as
// name.pem and name-key.pem. The common name is name, so a server can tell
// its clients apart by it.
func (ca *CA) Issue(dir, name string, hosts []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("key for %s: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"paysched (development only)"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return fmt.Errorf("sign %s: %w", name, err)
	}
	return writePair(dir, name+".pem", name+"-key.pem", der, key)
}

// Pool is a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// KeyPair loads the certificate Issue wrote for name.
func KeyPair(dir, name string) (tls.Certificate, error) {
	return tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
}

// WriteToken writes a random 32-byte bearer token, hex-encoded, to path
// unless the file exists already, and returns the token.
func WriteToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b), nil
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(buf)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	return tok, nil
}

func writePair(dir, certName, keyName string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, certName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", certName, err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyName), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyName, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	return n
}

// Files are the paths of what Prepare made.
type Files struct {
	CAFile, CertFile, KeyFile, TokenFile string
}

// Prepare makes, in dir, the CA (or reuses the one there), a certificate
// for name valid for hosts, and a bearer token file name-token, and returns
// their paths: what a server and its clients need for TLS with a token.
func Prepare(dir, name string, hosts []string) (Files, error) {
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		return Files{}, err
	}
	if err := ca.Issue(dir, name, hosts); err != nil {
		return Files{}, err
	}
	f := Files{CAFile: filepath.Join(dir, CAFile), CertFile: filepath.Join(dir, name+".pem"),
		KeyFile: filepath.Join(dir, name+"-key.pem"), TokenFile: filepath.Join(dir, name+"-token")}
	if _, err := WriteToken(f.TokenFile); err != nil {
		return Files{}, err
	}
	return f, nil
}
