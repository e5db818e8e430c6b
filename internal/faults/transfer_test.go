package faults_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

// transferEnv, when set to "<addr>[,<addr>...]", makes the test binary run transferMain
// instead of the tests: one process of TestTransfers, which moves money between accounts
// under DoAll. A list of several addresses is a Cluster's.
const transferEnv = "FENCEKIT_FAULTS_TRANSFER"

// The bank of TestTransfers: accounts, their opening balance, the transfers in all.
const (
	accounts       = 10
	openingBalance = 1000
	transfers      = 2000
	transferProcs  = 8
)

// bankClaim is the store's fenced read, as "SELECT ... FOR UPDATE" plus a token check: for
// each of two accounts it refuses the call unless the token is at least the account's mark,
// raises the mark to it (so that an older holder's write that comes later is refused) and
// returns the balances. KEYS[1], KEYS[2]: the accounts (hashes: balance, mark, writer);
// KEYS[3]: the stats hash. ARGV[1], ARGV[2]: the tokens; ARGV[3]: the writer's name.
// Returns {balance1, balance2}, or 0 when refused. A token equal to the mark from another
// writer counts as a duplicate (the same token issued twice).
const bankClaim = `
local function claim(key, token)
  local mark = tonumber(redis.call('HGET', key, 'mark') or '0')
  if token < mark then
    return false
  end
  if token == mark and redis.call('HGET', key, 'writer') ~= ARGV[3] then
    redis.call('HINCRBY', KEYS[3], 'dup', 1)
  end
  return true
end
local t1, t2 = tonumber(ARGV[1]), tonumber(ARGV[2])
if not claim(KEYS[1], t1) or not claim(KEYS[2], t2) then
  redis.call('HINCRBY', KEYS[3], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'mark', t1, 'writer', ARGV[3])
redis.call('HSET', KEYS[2], 'mark', t2, 'writer', ARGV[3])
return {tonumber(redis.call('HGET', KEYS[1], 'balance')), tonumber(redis.call('HGET', KEYS[2], 'balance'))}
`

// bankWrite is the store's fenced write of two rows in one transaction, as
//
//	UPDATE accounts SET balance = $new, fence_token = $token WHERE id = $id AND fence_token <= $token
//
// for both accounts, rolled back unless both rows pass: it sets both balances when each
// token is at least its account's mark and the writer is the one that claimed the mark, and
// appends each token to its account's log. KEYS[1], KEYS[2]: the accounts; KEYS[3]: the stats
// hash; KEYS[4], KEYS[5]: the accounts' token logs. ARGV[1], ARGV[2]: the tokens; ARGV[3],
// ARGV[4]: the new balances; ARGV[5]: the writer. Returns the number of writes accepted so
// far, or 0 when refused.
const bankWrite = `
local t1, t2 = tonumber(ARGV[1]), tonumber(ARGV[2])
local m1 = tonumber(redis.call('HGET', KEYS[1], 'mark') or '0')
local m2 = tonumber(redis.call('HGET', KEYS[2], 'mark') or '0')
if t1 < m1 or t2 < m2 or redis.call('HGET', KEYS[1], 'writer') ~= ARGV[5] or redis.call('HGET', KEYS[2], 'writer') ~= ARGV[5] then
  redis.call('HINCRBY', KEYS[3], 'rejected', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'balance', ARGV[3], 'mark', t1)
redis.call('HSET', KEYS[2], 'balance', ARGV[4], 'mark', t2)
redis.call('RPUSH', KEYS[4], t1)
redis.call('RPUSH', KEYS[5], t2)
return redis.call('HINCRBY', KEYS[3], 'done', 1)
`

// bank names the store's keys under prefix; one hash tag puts them in one Cluster slot, as
// one database would hold the accounts, apart from the locks.
type bank struct{ prefix string }

func (b bank) account(i int) string { return "{bank}:" + b.prefix + "acct:" + strconv.Itoa(i) }
func (b bank) log(i int) string     { return "{bank}:" + b.prefix + "log:" + strconv.Itoa(i) }
func (b bank) stats() string        { return "{bank}:" + b.prefix + "stats" }

// transferMain is one process of TestTransfers: it makes transfers between random pairs of
// accounts, listed in random order, each under DoAll of both accounts' locks and fenced by
// their tokens in the store, until it has made its share (its _COUNT) or, with _COUNT 0, until
// the store has accepted `transfers` in all. It prints "TRANSFER DONE <n>" at the end.
func transferMain() int {
	addrs := strings.Split(os.Getenv(transferEnv), ",")
	prefix := os.Getenv(transferEnv + "_PREFIX")
	name := os.Getenv(transferEnv + "_NAME")
	ttl, err := time.ParseDuration(os.Getenv(transferEnv + "_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "transfer: bad TTL:", err)
		return 2
	}
	count, _ := strconv.Atoi(os.Getenv(transferEnv + "_COUNT"))
	hold, _ := time.ParseDuration(os.Getenv(transferEnv + "_HOLD"))
	var client redis.UniversalClient
	if len(addrs) > 1 {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	} else {
		client = redis.NewClient(&redis.Options{Addr: addrs[0], DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	}
	defer client.Close()
	l := fencing.New(client, fencing.WithPrefix(prefix), fencing.WithTTL(ttl))
	defer l.Close()
	b := bank{prefix}
	claim, write := redis.NewScript(bankClaim), redis.NewScript(bankWrite)
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	ctx := context.Background()
	made := 0
	for count == 0 || made < count {
		from := rng.IntN(accounts)
		to := (from + 1 + rng.IntN(accounts-1)) % accounts
		amount := 1 + rng.IntN(50)
		resFrom, resTo := "acct-"+strconv.Itoa(from), "acct-"+strconv.Itoa(to)
		var total int64
		err := l.DoAll(ctx, []string{resFrom, resTo}, func(ctx context.Context) error {
			tf, ok1 := fencing.TokenFor(ctx, resFrom)
			tt, ok2 := fencing.TokenFor(ctx, resTo)
			if !ok1 || !ok2 {
				return errors.New("no token in DoAll's context")
			}
			keys := []string{b.account(from), b.account(to), b.stats()}
			res, err := claim.Run(ctx, client, keys, tf, tt, name).Result()
			if err != nil {
				return err
			}
			balances, ok := res.([]any)
			if !ok || len(balances) != 2 {
				return nil // refused: a newer holder claimed an account
			}
			bf, _ := balances[0].(int64)
			bt, _ := balances[1].(int64)
			if hold > 0 {
				time.Sleep(hold)
			}
			// The write goes out even if ctx was cancelled meanwhile (a write already on its
			// way when the holder paused): the store's check is what refuses it.
			keys = append(keys, b.log(from), b.log(to))
			n, err := write.Run(context.WithoutCancel(ctx), client, keys, tf, tt, bf-int64(amount), bt+int64(amount), name).Int64()
			total = n
			return err
		})
		switch {
		case err == nil && total > 0:
			made++
			if count == 0 && total >= transfers {
				fmt.Println("TRANSFER DONE", made)
				return 0
			}
		case err == nil, errors.Is(err, fencing.ErrNotHeld), errors.Is(err, fencing.ErrNotAcquired):
		default:
			fmt.Fprintln(os.Stderr, "transfer:", err)
			time.Sleep(10 * time.Millisecond)
		}
		if count == 0 && total == 0 {
			if n, _ := client.HGet(ctx, b.stats(), "done").Int64(); n >= transfers {
				break
			}
		}
	}
	fmt.Println("TRANSFER DONE", made)
	return 0
}

// transferChild starts one process of transferMain.
func transferChild(t *testing.T, addrs []string, prefix, name string, ttl, hold time.Duration, count int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), transferEnv+"="+strings.Join(addrs, ","), transferEnv+"_PREFIX="+prefix,
		transferEnv+"_NAME="+name, transferEnv+"_TTL="+ttl.String(), transferEnv+"_HOLD="+hold.String(),
		transferEnv+"_COUNT="+strconv.Itoa(count))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return cmd, &out
}

// openBank writes the opening balances.
func openBank(t *testing.T, c redis.UniversalClient, b bank) {
	t.Helper()
	for i := range accounts {
		if err := c.HSet(t.Context(), b.account(i), "balance", openingBalance, "mark", 0, "writer", "").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// audit checks the bank after the transfers: money conserved, each account's tokens strictly
// increasing in store order, no token accepted twice; it returns the stats hash.
func audit(t *testing.T, c redis.UniversalClient, b bank) map[string]string {
	t.Helper()
	ctx := context.Background()
	var sum int64
	for i := range accounts {
		n, err := c.HGet(ctx, b.account(i), "balance").Int64()
		if err != nil {
			t.Fatalf("balance %d: %v", i, err)
		}
		sum += n
		log, err := c.LRange(ctx, b.log(i), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		last := int64(0)
		for j, s := range log {
			tok, _ := strconv.ParseInt(s, 10, 64)
			if tok <= last {
				t.Errorf("account %d: write %d of %d carries token %d after %d: tokens must strictly increase", i, j, len(log), tok, last)
				break
			}
			last = tok
		}
	}
	if want := int64(accounts * openingBalance); sum != want {
		t.Errorf("money: got %d in all, want %d (conserved)", sum, want)
	}
	stats, err := c.HGetAll(ctx, b.stats()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if stats["dup"] != "" && stats["dup"] != "0" {
		t.Errorf("store saw %s tokens issued twice, want 0", stats["dup"])
	}
	return stats
}

// noLocksLeft fails t when a lock key of prefix still exists on any primary.
func noLocksLeft(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	scan := func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+"*:lock").Result()
		var held []string
		for _, k := range keys {
			// A shared or limited lock's hash outlives its last holder, holding none.
			if node.Type(ctx, k).Val() == "hash" {
				if _, holders, _ := wire.HashHolders(node.HGetAll(ctx, k).Val()); len(holders) == 0 {
					continue
				}
			}
			held = append(held, k)
		}
		if err == nil && len(held) > 0 {
			return fmt.Errorf("locks left: %v", held)
		}
		return err
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, cc)
	}
	if err != nil {
		t.Error(err)
	}
}

// TestTransfers runs 8 processes that make 2,000 transfers in all between 10 accounts,
// each under DoAll of both accounts (listed in random order, so A→B and B→A meet), each
// write fenced by both tokens in the store, on a standalone Redis and on a local 3-primary
// Cluster (where most pairs of accounts live in different slots). All must finish within
// 120s; money is conserved, no holder overlapped another (no write refused), and each
// account's tokens strictly increase in store order.
func TestTransfers(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"standalone", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var addrs []string
			var client redis.UniversalClient
			if tc.cluster {
				cl := redisproc.StartCluster(t, 3)
				addrs, client = cl.Addrs(), cl.Client(t)
			} else {
				s := redisproc.Start(t)
				addrs, client = []string{s.Addr()}, s.Client(t)
			}
			prefix := "transfers:"
			b := bank{prefix}
			openBank(t, client, b)
			begin := time.Now()
			const bound = 120 * time.Second
			var wg sync.WaitGroup
			for i := range transferProcs {
				cmd, out := transferChild(t, addrs, prefix, "p"+strconv.Itoa(i), 10*time.Second, 0, transfers/transferProcs)
				wg.Go(func() {
					done := make(chan error, 1)
					go func() { done <- cmd.Wait() }()
					select {
					case err := <-done:
						if err != nil || !strings.Contains(out.String(), fmt.Sprintf("TRANSFER DONE %d", transfers/transferProcs)) {
							t.Errorf("process %d: %v\n%s", i, err, out.String())
						}
					case <-time.After(bound):
						_ = cmd.Process.Kill()
						<-done
						t.Errorf("process %d did not finish within %v (a deadlock?):\n%s", i, bound, out.String())
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(begin)
			stats := audit(t, client, b)
			if stats["done"] != strconv.Itoa(transfers) {
				t.Errorf("store accepted %s transfers, want %d", stats["done"], transfers)
			}
			for _, k := range []string{"refused", "rejected"} {
				if stats[k] != "" && stats[k] != "0" {
					t.Errorf("store %s %s writes, want 0: two holders overlapped", k, stats[k])
				}
			}
			noLocksLeft(t, client, prefix)
			figure(t, "transfers-"+tc.name, "%d transfers by %d processes in %v (%.0f/s), stats %v",
				transfers, transferProcs, elapsed.Round(time.Millisecond), float64(transfers)/elapsed.Seconds(), stats)
		})
	}
}

// TestTransfersKilledAndStopped runs the transfers of TestTransfers with a 1s lease while
// holders are SIGKILLed (and replaced) and SIGSTOPped for 1.5–2.5s, past their lease, in the
// middle of a transfer (each holds its accounts for 20ms between the fenced read and the
// write). The store must refuse every late write: money is conserved and each account's
// tokens strictly increase. All must finish within 180s, and no lock may outlive its lease
// bound (TTL, or the 3s of a grant to a dead waiter) after the last process exits.
func TestTransfersKilledAndStopped(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	s := redisproc.Start(t)
	addrs, client := []string{s.Addr()}, s.Client(t)
	prefix := "faulty:"
	b := bank{prefix}
	openBank(t, client, b)
	const ttl, hold, bound = time.Second, 20 * time.Millisecond, 180 * time.Second
	type proc struct {
		cmd  *exec.Cmd
		out  *bytes.Buffer
		done chan error
	}
	start := func(i, gen int) *proc {
		cmd, out := transferChild(t, addrs, prefix, fmt.Sprintf("p%d.%d", i, gen), ttl, hold, 0)
		p := &proc{cmd: cmd, out: out, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		return p
	}
	procs := make([]*proc, transferProcs)
	for i := range procs {
		procs[i] = start(i, 0)
	}
	begin := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	kills, stops := 0, 0
	for gen := 1; ; gen++ {
		if time.Since(begin) > bound {
			for _, p := range procs {
				_ = p.cmd.Process.Kill()
			}
			t.Fatalf("transfers did not finish within %v; stats %v", bound, client.HGetAll(t.Context(), b.stats()).Val())
		}
		n, _ := client.HGet(t.Context(), b.stats(), "done").Int64()
		if n >= transfers {
			break
		}
		time.Sleep(time.Duration(200+rng.IntN(200)) * time.Millisecond)
		i := rng.IntN(transferProcs)
		p := procs[i]
		if rng.IntN(2) == 0 {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			kills++
			procs[i] = start(i, gen)
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		stops++
		pause := time.Duration(1500+rng.IntN(1000)) * time.Millisecond
		time.Sleep(pause)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	for i, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("process %d: %v\n%s", i, err, p.out.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("process %d did not stop after the last transfer:\n%s", i, p.out.String())
		}
	}
	ended := time.Now()
	elapsed := ended.Sub(begin)
	stats := audit(t, client, b)
	// A killed holder's locks run out with their lease (1s); a grant to a killed waiter with
	// the grant's 3s lease. Every process has exited by now.
	deadline := ended.Add(3*time.Second + ttl + 500*time.Millisecond)
	for {
		keys, err := client.Keys(t.Context(), prefix+"*:lock").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("locks still held %v after the last process exited: %v", time.Since(ended).Round(time.Millisecond), keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	figure(t, "transfers-faults", "%s transfers accepted in %v with %d SIGKILLs and %d SIGSTOPs of %v–2.5s (lease %v): stats %v; no lock left %v after the end",
		stats["done"], elapsed.Round(time.Millisecond), kills, stops, 1500*time.Millisecond, ttl, stats, time.Since(ended).Round(time.Millisecond))
}
