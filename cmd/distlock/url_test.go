package main

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestParseRedisURL(t *testing.T) {
	cases := []struct {
		url  string
		want string // what the parsed target says, in a compact form
	}{
		{"redis://localhost:6379", "single tcp localhost:6379 db=0 user= tls=false"},
		{"redis://h", "single tcp h:6379 db=0 user= tls=false"},
		{"redis://:pw@h:7000/3", "single tcp h:7000 db=3 user= tls=false pass"},
		{"rediss://alice:s%40cret@10.0.0.1:6380", "single tcp 10.0.0.1:6380 db=0 user=alice tls=true pass"},
		{"redis://[::1]:6380", "single tcp [::1]:6380 db=0 user= tls=false"},
		{"unix:///run/redis.sock?db=2", "single unix /run/redis.sock db=2 user= tls=false"},
		{"redis-sentinel://s1,s2:26380/mymaster", "failover mymaster [s1:26379 s2:26380] db=0 user= tls=false"},
		{"rediss-sentinel://app:pw@s1:1/m/2?sentinel_password=spw&dial_timeout=2s", "failover m [s1:1] db=2 user=app tls=true pass spass"},
		{"redis-cluster://n1:7000,n2:7001,[::1]:7002", "cluster [n1:7000 n2:7001 [::1]:7002] user= tls=false"},
		{"rediss-cluster://u:p@n1?max_retries=1", "cluster [n1:6379] user=u tls=true pass"},
		// the bounds of checkNumbers, and -1 where it means off
		{"redis://h/?pool_size=2147483647&max_retries=-1&pipeline_pool_size=-1&protocol=2&dial_timeout=9223372036", "single tcp h:6379 db=0 user= tls=false"},
		{"redis-cluster://n1?max_redirects=-1&pool_size=0", "cluster [n1:6379] user= tls=false"},
	}
	for _, tc := range cases {
		tg, err := parseRedisURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if got := describeTarget(tg); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.url, got, tc.want)
		}
		if !contextTimeouts(tg) {
			t.Errorf("%s: context deadlines not honoured", tc.url)
		}
	}
}

func TestParseRedisURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, msg string }{
		{"localhost:6379", "want SCHEME://"},
		{"http://h", "unknown scheme"},
		{"redis://a,b", "several hosts"},
		{"redis://h/x", "database"},
		{"redis://h?bogus=1", "bogus"},
		{"redis-sentinel://s1", "/MASTER"},
		{"redis-sentinel://s1/m/1/2", "/MASTER"},
		{"redis-sentinel://s1,,s2/m", "empty host"},
		{"redis-sentinel://s1/m?master_name=x", "in the path"},
		{"redis-cluster:///", "no host"},
		{"redis-cluster://n1/1", "database 0"},
		{"redis-cluster://n1?addr=n2:1", "HOST:PORT,HOST:PORT"},
		{"redis-cluster://n1:x:y", "bad host:port"},
		{"redis-cluster://u:p@n1:7000?%zz", "bad query"},
		// numbers go-redis takes but panics on or misreads
		{"redis://localhost/?pool_size=-5", "pool_size=-5: want 0 to 2147483647"},
		{"redis://h/?pool_size=2147483648", "pool_size=2147483648"},
		{"unix:///run/redis.sock?min_idle_conns=-1", "min_idle_conns=-1"},
		{"redis://h/?max_active_conns=1&max_active_conns=4294967296", "max_active_conns=4294967296"},
		{"rediss://h/?pipeline_read_buffer_size=9223372036854775807", "pipeline_read_buffer_size"},
		{"redis://h/?pipeline_pool_size=-2", "want -1 to"},
		{"redis://h/?max_retries=-5", "max_retries=-5"},
		{"redis://h/?protocol=4", "protocol=4: want 2 to 3"},
		{"redis://h/?dial_timeout=9223372037", "too long"},
		{"redis://h/-1", "database -1"},
		{"redis-sentinel://s1/m/-2", "database -2"},
		{"redis-sentinel://s1/m?pool_size=-5", "pool_size=-5"},
		{"redis-sentinel://s1/m?dialer_retries=-1", "dialer_retries=-1"},
		{"redis-cluster://n1?pool_size=-5", "pool_size=-5"},
		{"redis-cluster://n1?max_redirects=-3", "max_redirects=-3"},
		{"redis-cluster://n1?read_timeout=99999999999", "too long"},
	} {
		_, err := parseRedisURL(tc.url)
		if err == nil || !errors.Is(err, errBadURL) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: error %v, want one containing %q", tc.url, err, tc.msg)
		}
	}
	for _, tc := range []struct{ url, msg string }{
		{"redis://user:hunter22@h/x", "database"},
		// go-redis's errors quote the URL given to url.Parse
		{"redis://u:hunter22@h h", "invalid character"},
		{"rediss-cluster://u:hunter22@h h", "bad host:port"},
		// an escape error quotes the escape, here in the password
		{"redis://u:hunter22%zz@h", "bad password"},
		// passwords in query options
		{"redis-sentinel://a/m?sentinel_password=hunter22&read_timeout=x", "read_timeout"},
		{"redis-sentinel://a/m?password=hunter22%zz", "bad password"},
		{"redis-sentinel://a/m?x=1&sentinel_password=hunter22&master_name=m", "in the path"},
	} {
		_, err := parseRedisURL(tc.url)
		if err == nil || !errors.Is(err, errBadURL) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "hunter22") {
			t.Errorf("%s: error %v, want one containing %q and not the password", tc.url, err, tc.msg)
		}
	}
	// A bad number is a bad URL, status 64, not a panic in go-redis.
	code, _, stderr := dl(t, nil, "status", "--redis", "redis://localhost/?pool_size=-5")
	if code != exitUsage || !strings.Contains(stderr, "pool_size=-5: want 0") {
		t.Errorf("status with pool_size=-5: exit %d, want %d; stderr %q", code, exitUsage, stderr)
	}
}

// describeTarget is a compact, comparable form of a parsed target.
func describeTarget(t *target) string {
	var b strings.Builder
	switch {
	case t.single != nil:
		o := t.single
		b.WriteString("single " + o.Network + " " + o.Addr + " db=" + itoa(o.DB) + " user=" + o.Username)
		b.WriteString(" tls=" + boolS(o.TLSConfig != nil))
		if o.Password != "" {
			b.WriteString(" pass")
		}
	case t.failover != nil:
		o := t.failover
		b.WriteString("failover " + o.MasterName + " [" + strings.Join(o.SentinelAddrs, " ") + "] db=" + itoa(o.DB) + " user=" + o.Username)
		b.WriteString(" tls=" + boolS(o.TLSConfig != nil))
		if o.Password != "" {
			b.WriteString(" pass")
		}
		if o.SentinelPassword != "" {
			b.WriteString(" spass")
		}
	default:
		o := t.cluster
		b.WriteString("cluster [" + strings.Join(o.Addrs, " ") + "] user=" + o.Username)
		b.WriteString(" tls=" + boolS(o.TLSConfig != nil))
		if o.Password != "" {
			b.WriteString(" pass")
		}
	}
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

func contextTimeouts(t *target) bool {
	switch {
	case t.single != nil:
		return t.single.ContextTimeoutEnabled
	case t.failover != nil:
		return t.failover.ContextTimeoutEnabled
	}
	return t.cluster.ContextTimeoutEnabled
}

func boolS(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

// FuzzParseRedisURL: no input panics, and every error is a usage error that
// does not leak a password.
func FuzzParseRedisURL(f *testing.F) {
	for _, s := range []string{
		"redis://localhost:6379", "rediss://u:p@h:1/2?dial_timeout=1s", "unix:///tmp/s",
		"redis-sentinel://a,b:2/m/1?sentinel_password=x", "rediss-cluster://u:p@a:1,[::1]:2",
		"redis-cluster://", "redis-sentinel://@/", "redis://[::1", "redis://h:99999",
		"redis-cluster://a:1,,b", "redis-sentinel://a/%zz", "rediss://:@?#", "://", "",
		"redis-cluster://a?addr=b", "redis://h/1?db=x", "redis-sentinel://h/m?read_timeout=-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := parseRedisURL(s)
		if err != nil {
			if !errors.Is(err, errBadURL) {
				t.Fatalf("%q: error %v does not wrap errBadURL", s, err)
			}
			checkNoPasswordInError(t, s, err)
			return
		}
		if tg.single == nil && tg.failover == nil && tg.cluster == nil {
			t.Fatalf("%q: empty target", s)
		}
		_ = tg.String()
		_ = tg.tlsConfig()
	})
}

// checkNoPasswordInError fails if err, the error for URL s, repeats the
// password of s. A password can also occur in the message for other
// reasons (the same text elsewhere in s, or in the message's own words), so
// the check compares with a twin URL whose password differs in every letter
// and digit but has the same length, punctuation and (in)valid escapes, so
// that it takes the same path through the parsers: the password is leaked
// if it is in err but not in the twin's error, and the message must not
// depend on the password's content at all.
func checkNoPasswordInError(t *testing.T, s string, err error) {
	t.Helper()
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return
	}
	// The userinfo as every parser here sees it: up to the last '@' before
	// the first '/' or '?'. url.Parse cuts at '#' first: skip those.
	_, userinfo, _ := splitAuthority(rest)
	_, pass, hasPass := strings.Cut(userinfo, ":")
	if !hasPass || pass == "" || strings.Contains(userinfo, "#") {
		return
	}
	start := len(s) - len(rest) + len(userinfo) - len(pass)
	twin := s[:start] + otherPassword(pass) + s[start+len(pass):]
	_, twinErr := parseRedisURL(twin)
	if twinErr == nil {
		t.Fatalf("%q fails (%v) but %q, with another password of the same form, parses", s, err, twin)
	}
	msg, twinMsg := err.Error(), twinErr.Error()
	secrets := []string{pass}
	if dec, err := url.PathUnescape(pass); err == nil && dec != pass {
		secrets = append(secrets, dec)
	}
	for _, p := range secrets {
		if strings.Contains(msg, p) && !strings.Contains(twinMsg, p) {
			t.Fatalf("%q: error leaks the password %q: %s", s, p, msg)
		}
	}
	if msg != twinMsg {
		t.Fatalf("error depends on the password:\n%q: %s\n%q: %s", s, msg, twin, twinMsg)
	}
}

// otherPassword changes every ASCII letter and digit of p to another of its
// class (hex digits stay hex digits, so escapes stay valid or invalid) and
// keeps every other byte.
func otherPassword(p string) string {
	b := []byte(p)
	for i, c := range b {
		for _, r := range []string{"0123456789", "abcdef", "ABCDEF", "ghijklmnopqrstuvwxyz", "GHIJKLMNOPQRSTUVWXYZ"} {
			if j := strings.IndexByte(r, c); j >= 0 {
				b[i] = r[(j+1)%len(r)]
				break
			}
		}
	}
	return string(b)
}

// FuzzParseArgs: no command line panics a parser; a parsed `run` always has
// a key and a command.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"--wait\x000\x00k\x00--\x00true", "k\x00sh\x00-c\x00exit 3", "--ttl\x001.5\x00k\x00--\x00x",
		"--wait\x00NaN\x00k\x00x", "--wait\x00-1\x00k\x00x", "--redis\x00redis://a\x00--redis\x00b\x00k",
		"--json\x00job:*", "--force\x00k\x00--yes", "--\x00--", "-h", "--grace\x001e309\x00k\x00x",
		"--owner=\x00k\x00x", "k\x00--json\x00--\x00extra",
		"a\x00b\x00--\x00x", "--shared\x00a\x00b\x00--\x00x", "--limit\x002\x00k\x00x", "k\x00sh\x00-c\x00x\x00--\x00y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		for _, name := range []string{runName, electName} {
			if cfg, err := parseRunArgs(name, args); err == nil {
				if len(cfg.keys) == 0 || cfg.key == "" || len(cfg.command) == 0 || cfg.ttl <= 0 || cfg.grace < 0 ||
					(cfg.mode == holdLeader) != (name == electName) || (len(cfg.keys) > 1 && cfg.mode != holdLock) {
					t.Fatalf("%q parsed to %+v", args, cfg)
				}
			}
		}
		_, _ = parseLeaderArgs(args)
		_, _ = parseStatusArgs(args)
		_, _ = parseReleaseArgs(args)
		_, _ = parseDuration(s)
	})
}

// A password with an unencoded '/' or '?' ended the authority early, so the
// URL looked as if it had no password and its error quoted it whole: a typo
// in a crontab would put the secret into cron mail. docs/cli.md: "Messages
// never repeat a password".
func TestBadURLWithSlashInPasswordNeverRepeatsIt(t *testing.T) {
	for _, c := range []struct {
		raw     string
		secrets []string
	}{
		{"redis://user:Zq9/xK@localhost:6379", []string{"Zq9", "xK"}},
		{"redis://:Wv8?yJ@localhost:6379", []string{"Wv8", "yJ"}},
		{"rediss-sentinel://u:Hb7/tM@h1,h2/mymaster", []string{"Hb7", "tM"}},
		{"redis://user:Zq9/xK@localhost:6379/0", []string{"Zq9", "xK"}},
		{"redis-cluster://user:Zq9?xK@h1,h2", []string{"Zq9", "xK"}},
	} {
		_, err := parseRedisURL(c.raw)
		if err == nil {
			t.Errorf("%s parsed", c.raw)
			continue
		}
		for _, s := range c.secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("the error repeats part of the password (%q): %v", s, err)
			}
		}
	}
}
