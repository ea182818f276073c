package distlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// kind is what differs between the primitives that one engine serves:
// their scripts, their keys and how their waiters line up. A *Lock is a
// hold of any kind, so leases, renewal, loss signals, waiting and handoff
// are the same for all of them.
type kind struct {
	name   string // what a hold of this kind is: "lock", "leader", "read", "write", "permit"
	prefix string // starts the key's name, before the hash tag: "", "elect", "rw", "sem"
	// shared kinds keep their holds in a zset next to an exclusive grant
	// (lua/shared.lua): five keys, and extend and pttl need them all.
	shared  bool
	mode    string // line entry mode: "x" exclusive, "s" shared
	acquire *redis.Script
	release *redis.Script
	extend  *redis.Script
	pttl    *redis.Script
	// acquireArg is ARGV[12] of acquire (the announce flag of an election,
	// "r"/"w" of a read-write lock; a semaphore's limit is per call);
	// releaseArg is ARGV[8] of release (a semaphore's limit, per call).
	acquireArg any
}

var (
	//go:embed lua/shared.lua
	sharedSource string
	//go:embed lua/rw_acquire.lua
	rwAcquireSource string
	//go:embed lua/sem_acquire.lua
	semAcquireSource string
	//go:embed lua/shared_release.lua
	sharedReleaseSource string
	//go:embed lua/shared_extend.lua
	sharedExtendSource string
	//go:embed lua/shared_pttl.lua
	sharedPttlSource string
	//go:embed lua/proclaim.lua
	proclaimSource string

	rwAcquireScript     = redis.NewScript(libSource + sharedSource + rwAcquireSource)
	semAcquireScript    = redis.NewScript(libSource + sharedSource + semAcquireSource)
	sharedReleaseScript = redis.NewScript(libSource + sharedSource + sharedReleaseSource)
	sharedExtendScript  = redis.NewScript(libSource + sharedSource + sharedExtendSource)
	sharedPttlScript    = redis.NewScript(libSource + sharedSource + sharedPttlSource)
	proclaimScript      = redis.NewScript(libSource + proclaimSource)
)

var (
	mutexKind  = &kind{name: "lock", mode: "x", acquire: acquireScript, release: releaseScript, extend: extendScript, pttl: pttlScript}
	leaderKind = &kind{name: "leader", prefix: "elect", mode: "x", acquire: acquireScript, release: releaseScript,
		extend: extendScript, pttl: pttlScript, acquireArg: argTrue}
	readKind   = sharedKind("read", "rw", "s", "r")
	writeKind  = sharedKind("write", "rw", "x", "w")
	permitKind = sharedKind("permit", "sem", "s", nil)
)

func sharedKind(name, prefix, mode string, arg any) *kind {
	acquire := rwAcquireScript
	if prefix == "sem" {
		acquire = semAcquireScript
	}
	return &kind{name: name, prefix: prefix, shared: true, mode: mode, acquire: acquire,
		release: sharedReleaseScript, extend: sharedExtendScript, pttl: sharedPttlScript, acquireArg: arg}
}

// holdKeys are the KEYS of the extend and pttl scripts.
func (k *kind) holdKeys(names keyNames) []string {
	if k.shared {
		return names.keys
	}
	return names.keys[:1]
}
