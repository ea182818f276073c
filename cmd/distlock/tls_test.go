package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redistest"
)

// TestTLSAndACL runs distlock against a redis-server that speaks TLS and
// knows distlock's client only as the ACL user alice.
func TestTLSAndACL(t *testing.T) {
	certs := writeCerts(t)
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The harness keeps a plain loopback port to see the server is up; the
	// default user is switched off below, so only alice gets anything done.
	srv := redistest.Start(t,
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey,
		"--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "no",
		"--user", "alice", "on", ">secret", "~*", "&*", "+@all",
		"--user", "bob", "on", ">pw", "~other:*", "+@all",
	)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("rediss://alice:secret@127.0.0.1:%d", tlsPort)
	caEnv := "DISTLOCK_TLS_CA=" + certs.ca

	t.Run("run and status over TLS as alice", func(t *testing.T) {
		dir := t.TempDir()
		script := `echo "$DISTLOCK_FENCE" > fence; "$BIN" status --json "$DISTLOCK_KEY" > status.json`
		p := startDL(t, dir, []string{"BIN=" + binary(t), "DISTLOCK_REDIS_URL=" + url, caEnv},
			"run", "--wait", "0", "tls-job", "--", "sh", "-c", script)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		fenceOf(t, filepath.Join(dir, "fence"))
		if st := readFile(t, filepath.Join(dir, "status.json")); !strings.Contains(st, `"key": "tls-job"`) {
			t.Fatalf("status inside the run: %s", st)
		}
	})

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		msg  string
	}{
		{"flag form", nil, []string{"--redis", url, "--tls-ca", certs.ca}, 0, ""},
		{"no CA", nil, []string{"--redis", url}, exitRedis, "TLS failed"},
		{"wrong password", []string{caEnv}, []string{"--redis", strings.Replace(url, "secret", "nope", 1)}, exitRedis, "authentication or ACL failed"},
		{"user without access to distlock keys", []string{caEnv}, []string{"--redis", fmt.Sprintf("rediss://bob:pw@127.0.0.1:%d", tlsPort)}, exitRedis, "NOPERM"},
		{"plain text to the TLS port", nil, []string{"--redis", fmt.Sprintf("redis://alice:secret@127.0.0.1:%d", tlsPort)}, exitRedis, "Redis at"},
		{"TLS to the plain-text port", []string{caEnv}, []string{"--redis", "rediss://alice:secret@" + srv.Addr}, exitRedis, "is the server's port a TLS port?"},
		{"CA without TLS", nil, []string{"--redis", "redis://127.0.0.1:1", "--tls-ca", certs.ca}, exitUsage, "use rediss://"},
		{"missing CA file", nil, []string{"--redis", url, "--tls-ca", "/nonexistent.pem"}, exitUsage, "--tls-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "--wait", "0"}, tc.args...), "tls-case", "--", "true")
			code, _, stderr := dl(t, tc.env, args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d %q, want %d and %q", code, stderr, tc.code, tc.msg)
			}
			if strings.Contains(stderr, "secret") {
				t.Fatalf("stderr shows the password: %q", stderr)
			}
		})
	}

	t.Run("client certificate", func(t *testing.T) {
		mtlsPort, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		redistest.Start(t,
			"--tls-port", strconv.Itoa(mtlsPort),
			"--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey,
			"--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "yes",
		)
		url := fmt.Sprintf("rediss://127.0.0.1:%d", mtlsPort)
		code, _, stderr := dl(t, []string{caEnv}, "status", "--redis", url, "--tls-cert", certs.clientCert, "--tls-key", certs.clientKey)
		if code != exitNone {
			t.Fatalf("with a client certificate: exit %d %q", code, stderr)
		}
		if code, _, _ := dl(t, []string{caEnv}, "status", "--redis", url); code != exitRedis {
			t.Fatalf("without a client certificate: exit %d, want %d", code, exitRedis)
		}
	})
}

type certFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeCerts makes a CA and a server (127.0.0.1) and client certificate
// signed by it, as PEM files.
func writeCerts(t *testing.T) certFiles {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "distlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, name string) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".crt", "CERTIFICATE", der), writeKey(t, dir, name+".key", key)
	}
	var f certFiles
	f.ca = writePEM(t, dir, "ca.crt", "CERTIFICATE", caDER)
	f.serverCert, f.serverKey = leaf(2, x509.ExtKeyUsageServerAuth, "server")
	f.clientCert, f.clientKey = leaf(3, x509.ExtKeyUsageClientAuth, "client")
	return f
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, dir, name string, k *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "PRIVATE KEY", der)
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// 'distlock help urls' gives skip_verify=true (TLS without verifying) as
// one of the OPTIONS of every form, and rediss-cluster:// is "the same over
// TLS". go-redis reads skip_verify in single and Sentinel URLs only, so a
// rediss-cluster:// URL with it was a bad URL (64, "unexpected option").
// Here a one-node TLS Cluster whose certificate no CA given vouches for.
func TestClusterSkipVerify(t *testing.T) {
	certs := writeCerts(t)
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// tls-cluster: the node names its TLS port to TLS clients.
	srv := redistest.Start(t,
		"--tls-port", strconv.Itoa(tlsPort), "--tls-cluster", "yes", "--cluster-enabled", "yes",
		"--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey,
		"--tls-ca-cert-file", certs.ca, "--tls-auth-clients", "no",
	)
	ctx := ctxT(t, 20*time.Second)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if ctx.Err() != nil {
			t.Fatal("the one-node Cluster never became ok")
		}
		time.Sleep(20 * time.Millisecond) // polling the server's own progress
	}
	base := fmt.Sprintf("rediss-cluster://127.0.0.1:%d?dial_timeout=2s", tlsPort)
	if code, _, stderr := dl(t, nil, "status", "--redis", base); code != exitRedis || !strings.Contains(stderr, "TLS failed") {
		t.Fatalf("unverified certificate without skip_verify: exit %d %q, want %d", code, stderr, exitRedis)
	}
	if code, out, stderr := dl(t, nil, "status", "--redis", base+"&skip_verify=true"); code != exitNone || !strings.Contains(out, "no locks held") {
		t.Fatalf("with skip_verify=true: exit %d, stdout %q, stderr %q; want %d", code, out, stderr, exitNone)
	}
	if code, _, stderr := dl(t, nil, "status", "--redis", base+"&skip_verify=maybe"); code != exitUsage || !strings.Contains(stderr, "skip_verify") {
		t.Fatalf("skip_verify=maybe: exit %d %q, want %d", code, stderr, exitUsage)
	}
}
