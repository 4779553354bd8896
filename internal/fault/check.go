package fault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// GaveUpError is a run that stopped retrying: transient errors persisted
// for After without progress. Err is the last of them.
type GaveUpError struct {
	After time.Duration
	Err   error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("giving up after %s of transient errors without progress: %v", e.After, e.Err)
}

func (e *GaveUpError) Unwrap() error { return e.Err }

// LastError returns the error a give-up is about: the Err of a GaveUpError
// in err's chain, else err.
func LastError(err error) error {
	var g *GaveUpError
	if errors.As(err, &g) && g.Err != nil {
		return g.Err
	}
	return err
}

// Check says, in one sentence, what an operator should check about err, a
// transient error that persisted past the retry budget.
func Check(err error) string {
	var (
		op  *net.OpError
		dns *net.DNSError
		ne  net.Error
	)
	addr := func() string {
		if errors.As(err, &op) && op.Addr != nil {
			return op.Addr.String()
		}
		return "the server's address"
	}
	switch {
	case errors.Is(err, ErrCommitConflict):
		return "another writer keeps committing to the same lake table: make sure one tidemark, and no other tool, writes this pipeline's tables"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the disk (or quota) of the warehouse or spool directory is full: free space and start again; nothing unsaved was acknowledged"
	case errors.Is(err, ErrKafkaSendFailed):
		return "the Kafka brokers did not acknowledge in time: check that they run at the addresses sink names (host:port), their logs, and that enough in-sync replicas are up for acks=all; tidemark resends from its last checkpoint"
	case checkSource(err) != "":
		return checkSource(err)
	case errors.As(err, &dns):
		return fmt.Sprintf("the host name %q does not resolve: check the host in the connection string and the machine's DNS", dns.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing accepts connections at " + addr() + ": check that the server meant there runs and listens on that address and port (the source database: PostgreSQL's listen_addresses and port; or the Kafka brokers of sink or from), that no firewall rejects it, and the host and port in the connection string or URL"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to " + addr() + ": check the host in the connection string and the network between (routing, VPN)"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer from " + addr() + " in time: check that the host is up and that the network (firewall, proxy, routing) lets the connection through"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		return "the connection was cut again and again: check the server's log (restarts, terminated backends, wal_sender_timeout) and anything in between (proxy, load balancer)"
	}
	return "check the \"transient error, retrying\" warnings above, and that the source, the catalog and the warehouse are reachable"
}

// OneLine flattens a multi-line error message (pgx lists one line per
// address tried) into one line, dropping repeated lines.
func OneLine(msg string) string {
	var parts []string
	seen := map[string]bool{}
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		parts = append(parts, l)
	}
	return strings.Join(parts, " ")
}
