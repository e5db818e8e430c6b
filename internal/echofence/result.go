package echofence

import (
	"context"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fencing"
)

// RecordName names the record of a key's request among the memos of its resource
// (fencing.Memo): its key is "<prefix>{R}:idem", beside the lock's.
const RecordName = "idem"

// resultReply is what won for a key, read by a request whose release found its lock lost (its
// record was not written).
type resultReply struct {
	mine   bool   // the record is the call's: a lost reply's release had written it
	free   bool   // no record, and no later acquisition: nothing was stored
	stored string // the record that won, when another call's; "" when none
}

// wonFor reads what won for the key of name, for a request that held its lock with token:
// its record, or, when there is none, whether a later acquisition exists (the key's counter
// is past token: that request runs, and will write the record).
func wonFor(ctx context.Context, l *fencing.Locker, name string, token int64) (resultReply, error) {
	stored, ok, err := l.ReadMemo(ctx, name, RecordName)
	switch {
	case err != nil:
		return resultReply{}, err
	case ok && recordToken(stored) == token:
		return resultReply{mine: true}, nil
	case ok:
		return resultReply{stored: stored}, nil
	}
	st, err := l.Inspect(ctx, name)
	if err != nil {
		return resultReply{}, err
	}
	return resultReply{free: st.NextToken-1 <= token}, nil
}

// recordToken returns the token a record was written under (see record), 0 for one it cannot
// read.
func recordToken(stored string) int64 {
	rest, ok := strings.CutPrefix(stored, "1:")
	if !ok {
		return 0
	}
	digits, _, _ := strings.Cut(rest, ":")
	n, _ := strconv.ParseInt(digits, 10, 64)
	return n
}
