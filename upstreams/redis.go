package upstreams

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(RedisStore{})
	// go-redis logs every failed dial through a process-wide logger; the
	// store's own rate-limited warning says it once, so these go to debug.
	redis.SetLogger(redisDebugLog{})
}

// redisDebugLog sends go-redis's log lines to Caddy's log at debug level.
type redisDebugLog struct{}

func (redisDebugLog) Printf(_ context.Context, format string, v ...any) {
	if l := caddy.Log().Named("redis"); l.Core().Enabled(zap.DebugLevel) {
		l.Debug(fmt.Sprintf(format, v...))
	}
}

// Defaults of the redis pin store.
const (
	DefaultRedisAddress   = "localhost:6379"
	DefaultRedisKeyPrefix = "caddy:session_sticky:"
	DefaultRedisTimeout   = 50 * time.Millisecond
)

const (
	// redisRetryInterval is how long the store answers from the local
	// table after Redis failed, before one request tries Redis again.
	redisRetryInterval = 250 * time.Millisecond
	// redisWarnInterval is the least time between two warnings that Redis
	// cannot be reached.
	redisWarnInterval = 10 * time.Second
)

// storeErrors counts failed store operations of every policy since start,
// for the caddy_session_keeping_store_errors_total metric.
var storeErrors atomic.Uint64

// StoreErrors returns how many pin store operations failed since start;
// each was answered from the in-process table instead.
func StoreErrors() uint64 { return storeErrors.Load() }

// RedisStore keeps pins in Redis, so that every Caddy instance of a fleet
// sends a session to the same upstream, also after a re-pin or a spill.
//
// A pin is one string key, prefix + pool namespace + session key (all
// hashes: no raw id or client value is stored), whose value is the dial
// address of the upstream, plus the upstream the session avoids and until
// when. Keys expire after the policy's TTL; a request refreshes its key in
// the same round trip that reads it (GETEX PX). Concurrent first requests
// of a session from several instances converge on one upstream: each
// writes with SET NX GET and follows the value that was there first. A
// pin Redis lost (restart, flush, eviction) is written back by the next
// instance that holds a copy.
//
// The store fails open. No Redis call waits longer than timeout; a failed
// one is answered from the policy's in-process table (which mirrors every
// pin this instance reads or writes), counted in the store error metric,
// and logged at most every ten seconds. A request makes one call when its
// session is pinned, and two or three when it pins or re-pins; after a
// failed call the rest go to the local table at once, since the store then
// uses the local table alone for a quarter second, before it lets one
// request try Redis again. The first answer puts every request back on
// Redis.
//
// Redis 7.0 or later is required (SET with both NX and GET).
type RedisStore struct {
	// Addresses (host:port) of Redis. One address is a single server;
	// several are the seed nodes of a Redis Cluster or, with master_name,
	// Sentinels. Default: localhost:6379.
	Addresses []string `json:"addresses,omitempty"`

	// The master name known to the Sentinels; setting it selects Sentinel
	// mode.
	MasterName string `json:"master_name,omitempty"`

	// Credentials for Redis AUTH (ACL user name, and password). Placeholders
	// such as {env.REDIS_PASSWORD} are replaced when the config loads.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`

	// The database number (single server and Sentinel only).
	DB int `json:"db,omitempty"`

	// Connect with TLS.
	TLS bool `json:"tls,omitempty"`

	// The prefix of every key the store writes. Default:
	// "caddy:session_sticky:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// The longest one Redis call may take before it is answered from the
	// local table. Default: 50ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	client redis.UniversalClient
	logger *zap.Logger
	local  *PinTable
	ttl    time.Duration
	health *redisHealth
}

// redisHealth is what a store knows of Redis's recent answers. Its fields
// are atomics, updated by every request that uses the store.
type redisHealth struct {
	// retryAt is when Redis may be tried again after a failure, in Unix
	// nanoseconds; 0 while Redis answers.
	retryAt atomic.Int64
	// lastWarn is when the last warning was logged, in Unix nanoseconds;
	// failed counts the failures since.
	lastWarn atomic.Int64
	failed   atomic.Uint64
}

// CaddyModule returns the Caddy module information.
func (RedisStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.session_sticky.stores.redis",
		New: func() caddy.Module { return new(RedisStore) },
	}
}

// Provision applies defaults and creates the client. It does not connect:
// Caddy starts while Redis is down, and the store fails open until it is up.
func (s *RedisStore) Provision(ctx caddy.Context) error {
	s.logger = ctx.Logger()
	s.health = new(redisHealth)
	if len(s.Addresses) == 0 {
		s.Addresses = []string{DefaultRedisAddress}
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = DefaultRedisKeyPrefix
	}
	if s.Timeout == 0 {
		s.Timeout = caddy.Duration(DefaultRedisTimeout)
	}
	if err := s.Validate(); err != nil {
		return err
	}

	repl := caddy.NewReplacer()
	addrs := make([]string, len(s.Addresses))
	for i, a := range s.Addresses {
		addrs[i] = repl.ReplaceAll(a, "")
		if _, _, err := net.SplitHostPort(addrs[i]); err != nil {
			return fmt.Errorf("address: %q is not host:port: %v", addrs[i], err)
		}
	}
	timeout := time.Duration(s.Timeout)
	opts := &redis.UniversalOptions{
		Addrs:      addrs,
		MasterName: s.MasterName,
		Username:   repl.ReplaceAll(s.Username, ""),
		Password:   repl.ReplaceAll(s.Password, ""),
		DB:         s.DB,
		// Every wait is bounded by the operation's context; no retries,
		// a failed operation is answered locally.
		ContextTimeoutEnabled: true,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		MaxRetries:            -1,
		DialerRetries:         1,
		DisableIdentity:       true,
	}
	if s.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if len(addrs) == 1 && s.MasterName == "" {
			host, _, _ := net.SplitHostPort(addrs[0])
			opts.TLSConfig.ServerName = host
		}
	}
	s.client = redis.NewUniversalClient(opts)
	return nil
}

// Validate checks the configuration.
func (s *RedisStore) Validate() error {
	switch {
	case s.Timeout < 0:
		return fmt.Errorf("timeout: must be positive, got %s", time.Duration(s.Timeout))
	case s.DB < 0:
		return fmt.Errorf("db: must not be negative, got %d", s.DB)
	case s.DB != 0 && len(s.Addresses) > 1 && s.MasterName == "":
		return fmt.Errorf("db: a Redis Cluster has only database 0")
	}
	for _, a := range s.Addresses {
		if a == "" {
			return fmt.Errorf("address: must not be empty")
		}
	}
	return nil
}

// Cleanup closes the client.
func (s *RedisStore) Cleanup() error {
	if s.client == nil {
		return nil
	}
	return s.client.Close()
}

// PinStore attaches the store to a policy's local table and TTL.
func (s *RedisStore) PinStore(local *PinTable, ttl time.Duration) PinStore {
	s.local, s.ttl = local, ttl
	return s
}

// unpinned is the value of a pin deleted through the admin API. It stays
// for one TTL, so that no instance writes back its own copy of the pin as
// it does for a pin Redis lost; no dial address is "-".
const unpinned = "-"

// Get reads the pin and refreshes its TTL in one round trip. Redis is the
// truth while it answers; when it has no pin but this instance holds one
// (Redis restarted, was flushed or evicted the key), the local pin is
// written back, so that sessions stay where their caches are.
func (s *RedisStore) Get(k PinKey) (Pin, bool) {
	if !s.reachable() {
		return s.local.Get(k)
	}
	key := s.key(k)
	ctx, cancel := s.context()
	v, err := s.client.GetEx(ctx, key, s.ttl).Result()
	cancel()
	switch {
	case !s.answered(err):
		return s.local.Get(k)
	case err != nil: // no such key
		if pin, ok := s.local.Get(k); ok {
			return s.restore(k, key, pin)
		}
		return Pin{}, false
	}
	return s.adopt(k, key, v)
}

// Peek reads the pin without refreshing it in Redis (the local copy is
// brought up to date).
func (s *RedisStore) Peek(k PinKey) (Pin, bool) {
	if !s.reachable() {
		return s.local.Peek(k)
	}
	key := s.key(k)
	ctx, cancel := s.context()
	v, err := s.client.Get(ctx, key).Result()
	cancel()
	if !s.answered(err) || err != nil {
		return s.local.Peek(k)
	}
	return s.adopt(k, key, v)
}

// adopt takes a pin value read from Redis, keeping the local table in step.
func (s *RedisStore) adopt(k PinKey, key, v string) (Pin, bool) {
	if v == unpinned {
		s.local.Delete(k)
		return Pin{}, false
	}
	pin, err := decodePin(v)
	if err != nil {
		// Not a value this store wrote: the session counts as unpinned,
		// and the pin placed for it overwrites the value. Redis answered,
		// so it stays in use.
		s.warn(fmt.Errorf("key %s: %v", key, err))
		s.local.Delete(k)
		return Pin{}, false
	}
	s.local.Repin(k, pin.Upstream, pin.Avoid, pin.AvoidUntil)
	return pin, true
}

// restore writes a local pin that Redis does not hold, unless another
// instance wrote one first, which then wins.
func (s *RedisStore) restore(k PinKey, key string, pin Pin) (Pin, bool) {
	ctx, cancel := s.context()
	old, err := s.client.SetArgs(ctx, key, encodePin(pin.Upstream, pin.Avoid, pin.AvoidUntil),
		redis.SetArgs{Mode: "NX", TTL: s.ttl, Get: true}).Result()
	cancel()
	if !s.answered(err) || err != nil { // failed, or written
		return pin, true
	}
	return s.adopt(k, key, old)
}

// PinIfAbsent writes the pin unless one exists (SET NX GET) and returns the
// upstream of the pin in force.
func (s *RedisStore) PinIfAbsent(k PinKey, upstream string) string {
	if !s.reachable() {
		return s.local.PinIfAbsent(k, upstream)
	}
	key := s.key(k)
	ctx, cancel := s.context()
	old, err := s.client.SetArgs(ctx, key, upstream, redis.SetArgs{Mode: "NX", TTL: s.ttl, Get: true}).Result()
	cancel()
	switch {
	case !s.answered(err):
		return s.local.PinIfAbsent(k, upstream)
	case err != nil: // written
		s.local.Repin(k, upstream, "", time.Time{})
		return upstream
	}
	if pin, ok := s.adopt(k, key, old); ok {
		return pin.Upstream
	}
	// An unpinned (or unreadable) session is pinned afresh.
	s.Repin(k, upstream, "", time.Time{})
	return upstream
}

// Repin writes the pin in one SET. Unlike PinTable.Repin, an empty avoid
// clears a cooldown still running: the policy passes the avoid of the pin
// it read, so the pin written is the pin meant.
func (s *RedisStore) Repin(k PinKey, upstream, avoid string, avoidUntil time.Time) {
	s.local.Repin(k, upstream, avoid, avoidUntil)
	if !s.reachable() {
		return
	}
	if !time.Now().Before(avoidUntil) {
		avoid = ""
	}
	ctx, cancel := s.context()
	err := s.client.Set(ctx, s.key(k), encodePin(upstream, avoid, avoidUntil), s.ttl).Err()
	cancel()
	s.answered(err)
}

// markFailed sets the avoided upstream of an existing pin, keeping its
// upstream and TTL, in one atomic step.
var markFailed = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or v == '-' then return 0 end
local up = string.match(v, '^[^\n]*')
redis.call('SET', KEYS[1], up .. '\n' .. ARGV[1] .. '\n' .. ARGV[2], 'KEEPTTL')
return 1
`)

// MarkFailed makes the session avoid upstream until until.
func (s *RedisStore) MarkFailed(k PinKey, upstream string, until time.Time) {
	s.local.MarkFailed(k, upstream, until)
	if !s.reachable() {
		return
	}
	ctx, cancel := s.context()
	err := markFailed.Run(ctx, s.client, []string{s.key(k)}, upstream, until.UnixMilli()).Err()
	cancel()
	s.answered(err)
}

// Delete unpins the session for the whole fleet: the pin is replaced by a
// marker that lives for one TTL, so that no instance restores its copy.
func (s *RedisStore) Delete(k PinKey) bool {
	deleted := s.local.Delete(k)
	if !s.reachable() {
		return deleted
	}
	ctx, cancel := s.context()
	old, err := s.client.SetArgs(ctx, s.key(k), unpinned, redis.SetArgs{TTL: s.ttl, Get: true}).Result()
	cancel()
	if s.answered(err) && err == nil {
		deleted = deleted || old != unpinned
	}
	return deleted
}

// context bounds one Redis call by the store's timeout.
func (s *RedisStore) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(s.Timeout))
}

// key is the Redis key of a pin: the prefix, then the namespace and the
// session key in hex.
func (s *RedisStore) key(k PinKey) string {
	var b [128]byte
	out := append(b[:0], s.KeyPrefix...)
	var ns [8]byte
	binary.BigEndian.PutUint64(ns[:], k.Namespace)
	out = hex.AppendEncode(out, ns[:])
	out = append(out, ':')
	out = hex.AppendEncode(out, k.Session[:])
	return string(out)
}

// encodePin is a pin's value: the upstream, and when the session avoids
// one, a newline, the avoided upstream, a newline and the end of the
// cooldown in Unix milliseconds. Dial addresses hold no newline.
func encodePin(upstream, avoid string, avoidUntil time.Time) string {
	if avoid == "" {
		return upstream
	}
	return upstream + "\n" + avoid + "\n" + strconv.FormatInt(avoidUntil.UnixMilli(), 10)
}

// decodePin parses a value written by encodePin.
func decodePin(v string) (Pin, error) {
	up, rest, hasAvoid := strings.Cut(v, "\n")
	if up == "" {
		return Pin{}, errors.New("empty pin")
	}
	if !hasAvoid {
		return Pin{Upstream: up}, nil
	}
	avoid, ms, ok := strings.Cut(rest, "\n")
	until, err := strconv.ParseInt(ms, 10, 64)
	if !ok || avoid == "" || err != nil {
		return Pin{}, fmt.Errorf("malformed pin %q", v)
	}
	return Pin{Upstream: up, Avoid: avoid, AvoidUntil: time.UnixMilli(until)}, nil
}

// reachable reports whether an operation should go to Redis: yes while it
// answers; after a failure, no until the retry time, when exactly one
// caller gets to try.
func (s *RedisStore) reachable() bool {
	at := s.health.retryAt.Load()
	if at == 0 {
		return true
	}
	now := time.Now().UnixNano()
	return now >= at && s.health.retryAt.CompareAndSwap(at, now+int64(redisRetryInterval))
}

// answered records the outcome of a Redis call and reports whether Redis
// answered it; a missing key (redis.Nil) is an answer.
func (s *RedisStore) answered(err error) bool {
	if err != nil && !errors.Is(err, redis.Nil) {
		s.fail(err)
		return false
	}
	if s.health.retryAt.Load() != 0 && s.health.retryAt.Swap(0) != 0 {
		s.logger.Info("pin store reachable again; pins are shared through Redis", zap.Strings("addresses", s.Addresses))
	}
	return true
}

// fail records that Redis did not answer: the store uses the local table
// alone until the retry time.
func (s *RedisStore) fail(err error) {
	s.health.retryAt.Store(time.Now().UnixNano() + int64(redisRetryInterval))
	s.warn(err)
}

// warn counts a store error and logs it, at most every ten seconds.
func (s *RedisStore) warn(err error) {
	storeErrors.Add(1)
	n := s.health.failed.Add(1)
	now := time.Now().UnixNano()
	last := s.health.lastWarn.Load()
	if now-last < int64(redisWarnInterval) || !s.health.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.health.failed.Store(0)
	s.logger.Warn("pin store failed; placing sessions with this instance's table where Redis does not answer",
		zap.Strings("addresses", s.Addresses),
		zap.Uint64("failures_since_last_warning", n),
		zap.Error(err))
}

// Interface guards
var (
	_ caddy.Provisioner  = (*RedisStore)(nil)
	_ caddy.Validator    = (*RedisStore)(nil)
	_ caddy.CleanerUpper = (*RedisStore)(nil)
	_ PinStoreModule     = (*RedisStore)(nil)
	_ PinStore           = (*RedisStore)(nil)
)
