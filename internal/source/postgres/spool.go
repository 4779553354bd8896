package postgres

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// spool holds the raw pgoutput messages of one streamed (in-progress)
// transaction on local disk, so a transaction of any size costs a bounded
// amount of memory. Records are [subxid uint32][len uint32][message].
type spool struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	aborted map[uint32]bool
	bytes   int64
}

func newSpool(dir string, xid uint32) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("xid-%d.spool", xid))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create spool for transaction %d: %w", xid, err)
	}
	return &spool{path: path, f: f, w: bufio.NewWriterSize(f, 1<<20), aborted: map[uint32]bool{}}, nil
}

func (s *spool) append(subxid uint32, msg []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:], subxid)
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(msg)))
	if _, err := s.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("write spool %s: %w", s.path, err)
	}
	if _, err := s.w.Write(msg); err != nil {
		return fmt.Errorf("write spool %s: %w", s.path, err)
	}
	s.bytes += int64(len(msg)) + 8
	return nil
}

// replay calls fn for every message of a subtransaction that was not aborted,
// in the order they were received.
func (s *spool) replay(fn func(msg []byte) error) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("flush spool %s: %w", s.path, err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind spool %s: %w", s.path, err)
	}
	r := bufio.NewReaderSize(s.f, 1<<20)
	var hdr [8]byte
	buf := make([]byte, 0, 64<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read spool %s: %w", s.path, err)
		}
		sub := binary.BigEndian.Uint32(hdr[0:])
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("read spool %s: %w", s.path, err)
		}
		if s.aborted[sub] {
			continue
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}

func (s *spool) remove() {
	s.f.Close()
	os.Remove(s.path)
}
