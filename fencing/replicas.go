package fencing

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/wire"
)

// replicated runs call with EVAL on the primary that owns its first key, followed by WAIT on
// the same connection (WithReplicas), and fails with ErrNotReplicated when the script's reply
// says it wrote (wrote) and fewer replicas than cfg.replicas acknowledged it.
func (l *Locker) replicated(ctx context.Context, cfg *config, call wire.Call, wrote func(any) bool) (any, error) {
	res, acks, err := l.pipeWait(ctx, cfg, call)
	if _, moved := redis.IsMovedError(err); moved {
		// The slot moved: the script did not run. go-redis learns of it only from its own
		// commands, not from this pipeline's replies: reload the slot map and send it again.
		l.topo.Refresh(ctx)
		res, acks, err = l.pipeWait(ctx, cfg, call)
	}
	if err != nil {
		return nil, err
	}
	if wrote(res) {
		n, err := acks.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(cfg.replicas) {
			return nil, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, cfg.replicas, cfg.replicaTO)
		}
	}
	return res, nil
}

// pipeWait sends call with EVAL and WAIT in one pipeline to the primary of its first key.
func (l *Locker) pipeWait(ctx context.Context, cfg *config, call wire.Call) (any, *redis.IntCmd, error) {
	node, err := l.topo.Primary(ctx, call.Keys[0])
	if err != nil {
		return nil, nil, err
	}
	// EVAL, not EVALSHA: a NOSCRIPT reply inside the pipeline would cost a second WAIT.
	pipe := node.Pipeline()
	cmd := pipe.Eval(ctx, call.Script.Source(), call.Keys, call.Args...)
	acks := redis.NewIntCmd(ctx, "wait", cfg.replicas, cfg.replicaTO.Milliseconds())
	_ = pipe.Process(ctx, acks)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	return res, acks, err
}

// confirm extends a lock granted from the queue to cfg's TTL, with WithReplicas followed by a
// WAIT, which also covers the grant before it.
func (l *Locker) confirm(ctx context.Context, cfg *config, k *Lock) error {
	if cfg.replicas == 0 {
		return k.Extend(ctx, cfg.ttl)
	}
	begin := time.Now()
	res, err := l.replicated(ctx, cfg, k.extension(cfg.ttl), func(res any) bool { return res == int64(wire.Taken) })
	_, held, err := wire.ParseExtend(res, err)
	return k.extended(begin, cfg.ttl, held, err)
}
