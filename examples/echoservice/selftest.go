package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The self-test's load: per account, deposits of depositAmount; on the first account,
// withdrawals of withdrawAmount racing the deposits.
const (
	depositsPerAccount = 25
	depositAmount      = 10
	withdrawals        = 15
	withdrawAmount     = 5
)

// selftest serves the service on 127.0.0.1:0 with locks under a prefix of its own inside
// prefix, sends concurrent deposits and withdrawals, then checks that every deposit got
// through (waiting its turn), that no update was lost (the balances add up), that the store
// refused no write and that no lock is left held. It writes a report to out, deletes every
// key it created (locks and fence counters) and returns an error when a check fails.
func selftest(ctx context.Context, client redis.UniversalClient, prefix, backend string, tr *tracingSetup, out io.Writer) error {
	prefix = fmt.Sprintf("%sselftest-%d-%d:", prefix, os.Getpid(), time.Now().UnixNano())
	defer deleteKeys(context.WithoutCancel(ctx), client, prefix, out)
	locker := newLocker(client, prefix, tr)
	defer locker.Close()
	if err := checkServer(ctx, locker, out); err != nil {
		return err
	}
	store := newLedger()
	e, err := newService(locker, store, tr.Provider)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(sctx, ln, e) }()
	defer func() { stop(); <-served }()

	base := "http://" + ln.Addr().String()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	accounts := []string{"alice", "bob"}

	type result struct {
		route      string
		account    string
		status     int
		retryAfter string
		err        error
	}
	results := make(chan result, len(accounts)*depositsPerAccount+withdrawals)
	var wg sync.WaitGroup
	start := make(chan struct{})
	send := func(route, account string, amount int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			url := fmt.Sprintf("%s/accounts/%s/%s?amount=%d", base, account, route, amount)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
			if err != nil {
				results <- result{route: route, account: account, err: err}
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				results <- result{route: route, account: account, err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			results <- result{route: route, account: account, status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		}()
	}
	for _, a := range accounts {
		for range depositsPerAccount {
			send("deposit", a, depositAmount)
		}
	}
	for range withdrawals {
		send("withdraw", accounts[0], withdrawAmount)
	}
	begin := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(begin)
	close(results)

	var problems []string
	counts := map[string]map[int]int{"deposit": {}, "withdraw": {}}
	want := map[string]int64{} // the balances the successful requests add up to
	for r := range results {
		switch {
		case r.err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", r.route, r.err))
			continue
		case r.status == http.StatusLocked:
			if n, err := strconv.Atoi(r.retryAfter); err != nil || n < 1 {
				problems = append(problems, fmt.Sprintf("423 with Retry-After %q", r.retryAfter))
			}
		}
		counts[r.route][r.status]++
		if r.status == http.StatusOK {
			if r.route == "deposit" {
				want[r.account] += depositAmount
			} else {
				want[r.account] -= withdrawAmount
			}
		}
	}
	if got := counts["deposit"][http.StatusOK]; got != len(accounts)*depositsPerAccount {
		problems = append(problems, fmt.Sprintf("%d deposits succeeded, want all %d", got, len(accounts)*depositsPerAccount))
	}

	fmt.Fprintf(out, "echoservice self-test against %s (%s): %d requests in %v\n",
		base, backend, len(accounts)*depositsPerAccount+withdrawals, elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "  deposits     %s\n", statuses(counts["deposit"]))
	fmt.Fprintf(out, "  withdrawals  %s\n", statuses(counts["withdraw"]))
	var balances []string
	for _, a := range accounts {
		got, err := getBalance(ctx, hc, base, a)
		if err != nil {
			return err
		}
		if got != want[a] {
			problems = append(problems, fmt.Sprintf("%s has %d, want %d: an update was lost", a, got, want[a]))
		}
		balances = append(balances, fmt.Sprintf("%s=%d (want %d)", a, got, want[a]))
	}
	fmt.Fprintf(out, "  balances     %s\n", strings.Join(balances, ", "))
	refused := store.refusedWrites()
	if refused != 0 {
		problems = append(problems, fmt.Sprintf("the store refused %d stale writes", refused))
	}
	fmt.Fprintf(out, "  store        %d stale writes refused\n", refused)
	held, err := client.Keys(ctx, prefix+"*:lock").Result()
	if err != nil {
		return err
	}
	if len(held) != 0 {
		problems = append(problems, fmt.Sprintf("locks left held: %q", held))
	}
	fmt.Fprintf(out, "  redis        %d locks left held\n", len(held))

	if len(problems) > 0 {
		fmt.Fprintln(out, "FAIL")
		return errors.New("self-test failed: " + strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "OK")
	return nil
}

// deleteKeys deletes every key under prefix.
func deleteKeys(ctx context.Context, client redis.UniversalClient, prefix string, out io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		fmt.Fprintf(out, "echoservice: deleting the self-test's keys: %v\n", err)
	}
}

// statuses formats status counts as "3 × 200, 1 × 423".
func statuses(m map[int]int) string {
	codes := make([]int, 0, len(m))
	total := 0
	for c, n := range m {
		codes = append(codes, c)
		total += n
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d × %d", m[c], c)
	}
	return fmt.Sprintf("%d sent: %s", total, strings.Join(parts, ", "))
}

// getBalance reads an account's balance through the service.
func getBalance(ctx context.Context, hc *http.Client, base, account string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/accounts/"+account, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Balance int64 `json:"balance"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("balance of %s: %w", account, err)
	}
	return body.Balance, nil
}
