package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// urlForms is the help text on --redis; docs/cli.md has the same table.
const urlForms = `Redis URL forms (--redis, DISTLOCK_REDIS_URL):
  redis://[USER:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]      one server (port 6379)
  rediss://...                                            the same over TLS
  unix://[USER:PASSWORD@]/PATH/TO/SOCKET[?db=N]           one server, Unix socket
  redis-sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB][?OPTIONS]
                                                          the master that Sentinels
                                                          (port 26379) name MASTER
  rediss-sentinel://...                                   the same over TLS
  redis-cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?OPTIONS]
                                                          a Redis Cluster, from any
                                                          of its nodes
  rediss-cluster://...                                    the same over TLS
USER:PASSWORD authenticate to Redis (ACL user, or only :PASSWORD for
requirepass); percent-encode special characters. For Sentinel, pass the
Sentinels' own credentials as ?sentinel_username=U&sentinel_password=P.
OPTIONS are go-redis client options in snake case, e.g. dial_timeout=2s,
read_timeout=1s, max_retries=2, skip_verify=true (TLS without verifying).
`

// errBadURL is wrapped by every URL parsing error.
var errBadURL = errors.New("bad Redis URL")

// target is a parsed Redis URL: exactly one of the option sets is non-nil.
type target struct {
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

// parseRedisURL parses one of the URL forms in urlForms. It never panics and
// wraps errBadURL; errors do not repeat a password (see failure).
func parseRedisURL(raw string) (*target, error) {
	t, err := parseTarget(raw)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %s", errBadURL, redact(raw), failure(raw, err))
	}
	return t, nil
}

func parseTarget(raw string) (*target, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("want SCHEME://..., e.g. redis://localhost:6379")
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		return parseSingle(raw, rest)
	case "redis-sentinel", "rediss-sentinel":
		return parseSentinel(scheme, rest)
	case "redis-cluster", "rediss-cluster":
		return parseCluster(scheme, rest)
	}
	return nil, fmt.Errorf("unknown scheme %q (want redis, rediss, unix, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)", scheme)
}

// failure says why raw failed to parse with err, without its passwords:
// go-redis's errors (Go's url.Parse's) quote the whole URL, and an escape
// error quotes part of a password. So when raw has a password, the reason
// is that of the same URL with its passwords masked, whose errors cannot
// quote them; if that one parses, the password itself was the fault.
func failure(raw string, err error) string {
	if masked := redact(raw); masked != raw {
		if _, err = parseTarget(masked); err == nil {
			return "bad password (percent-encode special characters)"
		}
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}

func parseSingle(raw, rest string) (*target, error) {
	if host, _, _ := splitAuthority(rest); strings.Contains(host, ",") {
		return nil, errors.New("several hosts: use redis-cluster:// or redis-sentinel://, or run --quorum with one --redis per server")
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if o.Network != "unix" {
		_, port, _ := net.SplitHostPort(o.Addr)
		if err := checkPort(port); err != nil {
			return nil, err
		}
	}
	_, tail, _ := strings.Cut(rest, "?")
	q, _ := url.ParseQuery(tail) // go-redis has read it, as leniently
	if err := checkNumbers(q, o.DB); err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	o.DialerRetries = dialerRetries(o.DialerRetries)
	return &target{single: o}, nil
}

// splitAuthority splits "userinfo@h1,h2/path?query" into its host list,
// userinfo and the rest (from the first '/' or '?'). The userinfo ends at the
// last '@' so that passwords may contain an unencoded '@'.
func splitAuthority(rest string) (hosts, userinfo, tail string) {
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(auth, "@"); at >= 0 {
		return auth[at+1:], auth[:at], tail
	}
	return auth, "", tail
}

// hostList checks "h1:p1,h2,[::1]:p3", adding defPort where it is missing.
func hostList(hosts, defPort string) ([]string, error) {
	if hosts == "" {
		return nil, errors.New("no host")
	}
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, errors.New("empty host in the host list")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if strings.HasPrefix(h, "[") || strings.Count(h, ":") > 0 {
				return nil, fmt.Errorf("bad host:port %q", h)
			}
			host, port = h, defPort
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("bad host:port %q", h)
		}
		if strings.ContainsAny(host, "/?#@[]% ") || strings.ContainsAny(port, "/?#@[]% ") {
			return nil, fmt.Errorf("bad host:port %q", h)
		}
		if err := checkPort(port); err != nil {
			return nil, err
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// checkPort refuses a port out of 1 to 65535: go-redis takes any digits,
// and the dial would fail later, as if the server were down.
func checkPort(port string) error {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1 to 65535", port)
	}
	return nil
}

// goRedisURL rebuilds a URL that go-redis's own parsers read: the first host
// in the authority, the others as addr query parameters.
func goRedisURL(tlsOn bool, userinfo string, hosts []string, path string, q url.Values) string {
	scheme := "redis"
	if tlsOn {
		scheme = "rediss"
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u := scheme + "://"
	if userinfo != "" {
		u += userinfo + "@"
	}
	u += hosts[0] + path
	if enc := q.Encode(); enc != "" {
		u += "?" + enc
	}
	return u
}

func splitQuery(tail string) (path string, q url.Values, err error) {
	path, query, _ := strings.Cut(tail, "?")
	q, err = url.ParseQuery(query)
	if err != nil {
		return "", nil, fmt.Errorf("bad query: %v", err)
	}
	if q.Has("addr") {
		return "", nil, errors.New("give several hosts as HOST:PORT,HOST:PORT, not addr=")
	}
	return path, q, nil
}

// userPassword decodes "user:password" as a URL does.
func userPassword(userinfo string) (string, string, error) {
	if userinfo == "" {
		return "", "", nil
	}
	u, err := url.Parse("x://" + userinfo + "@h")
	if err != nil || u.User == nil {
		return "", "", errors.New("bad USER:PASSWORD (percent-encode special characters)")
	}
	p, _ := u.User.Password()
	return u.User.Username(), p, nil
}

func parseSentinel(scheme, rest string) (*target, error) {
	hostPart, userinfo, tail := splitAuthority(rest)
	hosts, err := hostList(hostPart, "26379")
	if err != nil {
		return nil, err
	}
	path, q, err := splitQuery(tail)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if parts[0] == "" || len(parts) > 2 {
		return nil, errors.New("want /MASTER or /MASTER/DB after the Sentinel hosts")
	}
	master, err := url.PathUnescape(parts[0])
	if err != nil {
		return nil, fmt.Errorf("bad master name %q", parts[0])
	}
	dbPath := ""
	if len(parts) == 2 {
		dbPath = "/" + parts[1]
	}
	if q.Has("master_name") {
		return nil, errors.New("give the master name in the path, not master_name=")
	}
	q.Set("master_name", master)
	sUser, sPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	user, pass, err := userPassword(userinfo)
	if err != nil {
		return nil, err
	}
	// go-redis reads the URL's userinfo as the Sentinels' credentials; ours
	// are the master's, which is what users of a plain URL expect.
	o, err := redis.ParseFailoverURL(goRedisURL(isTLSScheme(scheme), "", hosts, dbPath, q))
	if err != nil {
		return nil, err
	}
	if err := checkNumbers(q, o.DB); err != nil {
		return nil, err
	}
	if userinfo != "" {
		o.Username, o.Password = user, pass
	}
	o.SentinelUsername, o.SentinelPassword = sUser, sPass
	o.ContextTimeoutEnabled = true
	o.DialerRetries = dialerRetries(o.DialerRetries)
	return &target{failover: o}, nil
}

func parseCluster(scheme, rest string) (*target, error) {
	hostPart, userinfo, tail := splitAuthority(rest)
	hosts, err := hostList(hostPart, "6379")
	if err != nil {
		return nil, err
	}
	path, q, err := splitQuery(tail)
	if err != nil {
		return nil, err
	}
	if strings.Trim(path, "/") != "" {
		return nil, errors.New("a Cluster has only database 0: drop the path")
	}
	if _, _, err := userPassword(userinfo); err != nil {
		return nil, err
	}
	skipVerify, err := takeSkipVerify(scheme, q)
	if err != nil {
		return nil, err
	}
	o, err := redis.ParseClusterURL(goRedisURL(isTLSScheme(scheme), userinfo, hosts, "", q))
	if err != nil {
		return nil, err
	}
	if err := checkNumbers(q, 0); err != nil {
		return nil, err
	}
	if o.TLSConfig != nil {
		o.TLSConfig.MinVersion = tls.VersionTLS12
		o.TLSConfig.InsecureSkipVerify = skipVerify
	}
	o.ContextTimeoutEnabled = true
	o.DialerRetries = dialerRetries(o.DialerRetries)
	return &target{cluster: o}, nil
}

// takeSkipVerify removes skip_verify from the options of a TLS Cluster
// URL and reads it as go-redis reads it in the other URLs, which urlForms
// offers it for: go-redis's Cluster parser knows no skip_verify. Without
// TLS it is left for go-redis to refuse, as there.
func takeSkipVerify(scheme string, q url.Values) (bool, error) {
	if !isTLSScheme(scheme) || !q.Has("skip_verify") {
		return false, nil
	}
	v := q.Get("skip_verify")
	q.Del("skip_verify")
	switch v {
	case "true", "1":
		return true, nil
	case "false", "0", "":
		return false, nil
	}
	return false, fmt.Errorf("skip_verify=%s: want true, false, 1 or 0", v)
}

// isTLSScheme tells whether a Sentinel or Cluster scheme, matched without
// regard to case as parseTarget matches it, asks for TLS: REDISS-SENTINEL://
// spoke plain text, password included.
func isTLSScheme(scheme string) bool {
	return strings.HasPrefix(strings.ToLower(scheme), "rediss")
}

// intOptions bounds the integer options that go-redis reads from a URL
// without checking their range. Out of it a pool size panics as the client
// is made (a negative one in make, one past int32 in the pool), a huge
// buffer when a pipeline dials, and other negative numbers mean nothing
// (-1, where allowed, turns retries, redirects or the pipeline pool off).
var intOptions = map[string]struct{ lo, hi int }{
	"pool_size":                  {0, math.MaxInt32},
	"min_idle_conns":             {0, math.MaxInt32},
	"max_idle_conns":             {0, math.MaxInt32},
	"max_active_conns":           {0, math.MaxInt32},
	"max_concurrent_dials":       {0, math.MaxInt32},
	"pipeline_read_buffer_size":  {0, math.MaxInt32},
	"pipeline_write_buffer_size": {0, math.MaxInt32},
	"dialer_retries":             {0, math.MaxInt32},
	"failing_timeout_seconds":    {0, math.MaxInt32},
	"max_retries":                {-1, math.MaxInt32},
	"max_redirects":              {-1, math.MaxInt32},
	"pipeline_pool_size":         {-1, math.MaxInt32},
	"protocol":                   {2, 3},
}

// durationOptions are the options go-redis reads as durations: plain
// seconds it multiplies into nanoseconds unchecked, which wraps around.
var durationOptions = []string{
	"dial_timeout", "read_timeout", "write_timeout", "pool_timeout",
	"min_retry_backoff", "max_retry_backoff", "dialer_retry_timeout",
	"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
	"conn_max_lifetime_jitter", "route_by_latency_tolerance",
}

// checkNumbers refuses the numbers of a URL that go-redis accepts but
// would panic on or misread: options out of range (intOptions), seconds
// past the longest duration, and a negative database.
func checkNumbers(q url.Values, db int) error {
	if db < 0 {
		return fmt.Errorf("database %d: want 0 or more", db)
	}
	for _, name := range slices.Sorted(maps.Keys(intOptions)) { // the same error every time
		r := intOptions[name]
		for _, v := range q[name] {
			if n, err := strconv.Atoi(v); err == nil && (n < r.lo || n > r.hi) {
				return fmt.Errorf("%s=%s: want %d to %d", name, v, r.lo, r.hi)
			}
		}
	}
	for _, name := range durationOptions {
		for _, v := range q[name] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > int64(math.MaxInt64/time.Second) {
				return fmt.Errorf("%s=%s: too long (at most %d seconds)", name, v, int64(math.MaxInt64/time.Second))
			}
		}
	}
	return nil
}

// dialerRetries is how often go-redis dials again at once when a dial fails,
// unless the URL says (dialer_retries). Its default, 5 (100ms apart),
// within each of a command's four tries, made a refused connection take 2s
// to report, longer than a --wait's end may, and a server that does not
// speak TLS 25s (its 5s dial timeout, five times). One dial per try: the
// command's own retries remain, and a keeper renews again on its schedule.
func dialerRetries(fromURL int) int {
	if fromURL != 0 {
		return fromURL
	}
	return 1
}

// tlsConfig returns the target's TLS settings, nil without TLS.
func (t *target) tlsConfig() *tls.Config {
	switch {
	case t.single != nil:
		return t.single.TLSConfig
	case t.failover != nil:
		return t.failover.TLSConfig
	default:
		return t.cluster.TLSConfig
	}
}

// client connects lazily: go-redis dials on the first command.
func (t *target) client() redis.UniversalClient {
	switch {
	case t.single != nil:
		return redis.NewClient(t.single)
	case t.failover != nil:
		return redis.NewFailoverClient(t.failover)
	default:
		return redis.NewClusterClient(t.cluster)
	}
}

// String names the target for messages, without credentials.
func (t *target) String() string {
	switch {
	case t.single != nil:
		return t.single.Addr
	case t.failover != nil:
		return fmt.Sprintf("master %q via Sentinel %s", t.failover.MasterName, strings.Join(t.failover.SentinelAddrs, ","))
	default:
		return "Cluster " + strings.Join(t.cluster.Addrs, ",")
	}
}

// redact hides the passwords of a URL for messages: the userinfo's, and
// the values of query options named like password (password=,
// sentinel_password=). The URL keeps its shape, for failure.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") || passwordOption.MatchString(raw) {
			return "(redacted)"
		}
		return raw
	}
	_, userinfo, _ := splitAuthority(rest)
	if userinfo == "" {
		// A password with an unencoded '/' or '?' ends the authority early
		// for splitAuthority: mask up to the last '@' (too much, at worst).
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass && !strings.ContainsAny(user, "/?") {
				userinfo = rest[:at]
			}
		}
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		rest = user + ":xxxxx@" + rest[len(userinfo)+1:]
	}
	return scheme + "://" + passwordOption.ReplaceAllString(rest, "${1}xxxxx")
}

// passwordOption matches a query option named like password, up to its
// value: the value ends at the next '&' or '#'.
var passwordOption = regexp.MustCompile(`(?i)([?&][^=&#?]*password=)[^&#]*`)
