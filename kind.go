package distlock

import _ "embed"

// kind is what differs between the primitives that one engine serves:
// their scripts, their keys and how their waiters line up. A *Lock is a
// hold of any kind, so leases, renewal, loss signals, waiting and handoff
// are the same for all of them.
type kind struct {
	name      string // what a hold of this kind is: "lock", "leader", "read", "write", "permit"
	primitive string // what it is a hold of, for errors: "lock", "election", "read-write lock", "semaphore"
	prefix    string // starts the key's name, before the hash tag: "", "elect", "rw", "sem"
	// announce: releases publish on "<lock>:released" ("h" handed over,
	// "r" freed) and grants "a", so that observers of an election hear of
	// every change
	announce bool
	busy     string // says why TryLock failed: "is held by another owner"
	// reentrant kinds accept WithOwner: plain locks only. Shared holds
	// are counted one per hold, and a leadership taken twice under one
	// owner would be two leaders of one term.
	reentrant bool
	// shared kinds keep their holds in a zset next to an exclusive grant
	// (lua/shared.lua): five keys, and extend and pttl need them all.
	shared bool
	mode   string // line entry mode: "x" exclusive, "s" shared
	// try is the attempt that does not line up (try.lua), nil when acquire
	// makes it (mode "t")
	try     *script
	acquire *script
	release releaseScripts
	extend  *script
	pttl    *script
	// acquireArg is the kind's own argument of acquire: the announce flag
	// of an election (ARGV[12] of acquire.lua), "r"/"w" of a read-write
	// lock (ARGV[7], see shared.lua; a semaphore's limit is per call). A
	// semaphore's release takes its limit too (ARGV[5] of
	// shared_release.lua), per call.
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
	//go:embed lua/inspect_shared.lua
	inspectSharedSource string

	rwAcquireScript     = newDrawingScript(libSource + sharedSource + rwAcquireSource)
	semAcquireScript    = newDrawingScript(libSource + sharedSource + semAcquireSource)
	sharedReleaseScript = newReleaseScripts(libSource + sharedSource + sharedReleaseSource)
	sharedExtendScript  = newScript(libSource + sharedSource + sharedExtendSource)
	sharedPttlScript    = newScript(libSource + sharedSource + sharedPttlSource)
	proclaimScript      = newScript(libSource + proclaimSource)
	inspectSharedScript = newScript(libSource + sharedSource + inspectSharedSource)
)

var (
	mutexKind = &kind{name: "lock", primitive: "lock", mode: "x", busy: "is held by another owner", reentrant: true,
		try: tryScript, acquire: acquireScript, release: releaseScript, extend: extendScript, pttl: pttlScript}
	leaderKind = &kind{name: "leader", primitive: "election", prefix: "elect", mode: "x", announce: true, busy: "has a leader",
		try: tryScript, acquire: acquireScript, release: releaseScript, extend: extendScript, pttl: pttlScript, acquireArg: argTrue}
	readKind   = sharedKind("read", "read-write lock", "rw", "s", rwAcquireScript, "r", "is write-locked or a writer waits")
	writeKind  = sharedKind("write", "read-write lock", "rw", "x", rwAcquireScript, "w", "is held or others wait")
	permitKind = sharedKind("permit", "semaphore", "sem", "s", semAcquireScript, nil, "has no free permit")
)

func sharedKind(name, primitive, prefix, mode string, acquire *script, arg any, busy string) *kind {
	return &kind{name: name, primitive: primitive, prefix: prefix, shared: true, mode: mode, acquire: acquire, busy: busy,
		release: sharedReleaseScript, extend: sharedExtendScript, pttl: sharedPttlScript, acquireArg: arg}
}

// holdKeys are the KEYS of the extend and pttl scripts.
func (k *kind) holdKeys(names keyNames) []string {
	if k.shared {
		return names.keys
	}
	return names.keys[:1]
}
