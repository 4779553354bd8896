package mysql

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// Flavor is the kind of server: its GTIDs, variables and privileges differ.
type Flavor string

const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// FlavorOf tells the flavour from SELECT VERSION() ("10.11.6-MariaDB-log"
// is MariaDB, "8.0.36" MySQL).
func FlavorOf(version string) Flavor {
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return MariaDB
	}
	return MySQL
}

func (f Flavor) valid() bool { return f == MariaDB || f == MySQL }

// GTID is one transaction's global transaction ID.
//
// MariaDB: domain-server-seq ("0-1-17"): Seq orders the transactions of a
// domain (strictly, with gtid_strict_mode=ON); ServerID is the server that
// wrote it first. MySQL: uuid:gno ("3E11FA47-71CA-11E1-9E33-C80AA9429562:23"):
// the gno-th transaction of the server with that server_uuid.
type GTID struct {
	Flavor   Flavor
	Domain   uint32    // MariaDB
	ServerID uint32    // MariaDB
	Seq      uint64    // MariaDB seq_no; MySQL gno (≥ 1)
	UUID     uuid.UUID // MySQL source_id
}

// ParseGTID parses one transaction's GTID of flavour f.
func ParseGTID(f Flavor, s string) (GTID, error) {
	switch f {
	case MariaDB:
		d, err := parseMariaDBGTID(s)
		if err != nil {
			return GTID{}, err
		}
		return d, nil
	case MySQL:
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return GTID{}, fmt.Errorf("invalid MySQL GTID %q: want uuid:number", s)
		}
		u, err := uuid.Parse(s[:i])
		if err != nil || len(s[:i]) != 36 {
			return GTID{}, fmt.Errorf("invalid MySQL GTID %q: %q is not a server UUID", s, s[:i])
		}
		n, err := strconv.ParseUint(s[i+1:], 10, 63)
		if err != nil || n == 0 {
			return GTID{}, fmt.Errorf("invalid MySQL GTID %q: %q is not a transaction number ≥ 1", s, s[i+1:])
		}
		return GTID{Flavor: MySQL, UUID: u, Seq: n}, nil
	}
	return GTID{}, fmt.Errorf("invalid GTID %q: unknown flavour %q", s, f)
}

func parseMariaDBGTID(s string) (GTID, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 3 {
		return GTID{}, fmt.Errorf("invalid MariaDB GTID %q: want domain-server-seq", s)
	}
	var n [3]uint64
	for i, p := range parts {
		bits := 32
		if i == 2 {
			bits = 64
		}
		v, err := strconv.ParseUint(p, 10, bits)
		if err != nil || p == "" || p[0] == '+' {
			return GTID{}, fmt.Errorf("invalid MariaDB GTID %q: %q is not a %s", s, p,
				[3]string{"domain id", "server id", "sequence number"}[i])
		}
		n[i] = v
	}
	return GTID{Flavor: MariaDB, Domain: uint32(n[0]), ServerID: uint32(n[1]), Seq: n[2]}, nil
}

func (g GTID) String() string {
	if g.Flavor == MariaDB {
		return string(g.appendMariaDB(nil))
	}
	return fmt.Sprintf("%s:%d", g.UUID, g.Seq)
}

// appendMariaDB appends MariaDB's domain-server-seq form of g.
func (g GTID) appendMariaDB(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(g.Domain), 10)
	b = strconv.AppendUint(append(b, '-'), uint64(g.ServerID), 10)
	return strconv.AppendUint(append(b, '-'), g.Seq, 10)
}

// GTIDSet is a replication position expressed in GTIDs: the transactions
// read so far. It is a value: Add returns a new set.
//
// MariaDB: the last GTID of each replication domain ("0-1-17,1-5-3",
// @@gtid_binlog_pos, what a replica sends as its slave_connect_state);
// a transaction of a domain is in the set when its seq is at most the
// domain's (true under gtid_strict_mode, which keeps seqs increasing).
// MySQL: the executed intervals per server UUID ("uuid:1-5:7-9,uuid2:1-3",
// @@gtid_executed); membership is exact. The zero GTIDSet is invalid: parse
// "" of a flavour for an empty set.
type GTIDSet struct {
	flavor  Flavor
	domains map[uint32]GTID       // MariaDB: domain -> last GTID
	mysql   *gomysql.MysqlGTIDSet // MySQL: never nil for MySQL
}

// ParseGTIDSet parses a GTID set of flavour f ("" is the empty set).
// MySQL sets may contain the spaces and newlines @@gtid_executed prints.
// Malformed text is an error that quotes it.
func ParseGTIDSet(f Flavor, s string) (GTIDSet, error) {
	switch f {
	case MariaDB:
		set := GTIDSet{flavor: MariaDB, domains: map[uint32]GTID{}}
		s = strings.TrimSpace(s)
		if s == "" {
			return set, nil
		}
		for _, part := range strings.Split(s, ",") {
			g, err := parseMariaDBGTID(strings.TrimSpace(part))
			if err != nil {
				return GTIDSet{}, fmt.Errorf("invalid MariaDB GTID set %q: %w", s, err)
			}
			if prev, ok := set.domains[g.Domain]; ok {
				return GTIDSet{}, fmt.Errorf("invalid MariaDB GTID set %q: domain %d appears twice (%s, %s): a position has one GTID per domain", s, g.Domain, prev, g)
			}
			set.domains[g.Domain] = g
		}
		return set, nil
	case MySQL:
		clean := strings.Join(strings.Fields(s), "")
		if clean != "" {
			// go-mysql accepts an empty element and a UUID in other
			// spellings (urn:uuid:, braces): refuse what MySQL would.
			for _, part := range strings.Split(clean, ",") {
				i := strings.IndexByte(part, ':')
				if i != 36 {
					return GTIDSet{}, fmt.Errorf("invalid MySQL GTID set %q: %q does not start with a server UUID and ':'", s, part)
				}
			}
		}
		gs, err := gomysql.ParseMysqlGTIDSet(clean)
		if err != nil {
			return GTIDSet{}, fmt.Errorf("invalid MySQL GTID set %q: %v", s, err)
		}
		ms := gs.(*gomysql.MysqlGTIDSet)
		for _, u := range ms.Sets {
			for _, in := range u.Intervals {
				if in.Start < 1 {
					return GTIDSet{}, fmt.Errorf("invalid MySQL GTID set %q: transaction numbers start at 1", s)
				}
			}
		}
		return GTIDSet{flavor: MySQL, mysql: ms}, nil
	}
	return GTIDSet{}, fmt.Errorf("invalid GTID set %q: unknown flavour %q", s, f)
}

// Flavor returns the set's flavour.
func (s GTIDSet) Flavor() Flavor { return s.flavor }

// IsEmpty reports whether the set holds no transaction.
func (s GTIDSet) IsEmpty() bool {
	if s.flavor == MySQL {
		return s.mysql == nil || len(s.mysql.Sets) == 0
	}
	return len(s.domains) == 0
}

// String formats the set canonically: MariaDB domains in ascending order,
// MySQL UUIDs in ascending order (lower case) with merged intervals.
// ParseGTIDSet(f, s.String()) equals s.
func (s GTIDSet) String() string {
	switch s.flavor {
	case MariaDB:
		if len(s.domains) == 1 {
			// One domain, the common case: no sort (the stream renders
			// its set once per event batch).
			for _, g := range s.domains {
				return string(g.appendMariaDB(make([]byte, 0, 32)))
			}
		}
		ds := make([]uint32, 0, len(s.domains))
		for d := range s.domains {
			ds = append(ds, d)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		parts := make([]string, len(ds))
		for i, d := range ds {
			parts[i] = s.domains[d].String()
		}
		return strings.Join(parts, ",")
	case MySQL:
		if s.mysql == nil {
			return ""
		}
		return s.mysql.String()
	}
	return ""
}

// Equal reports whether s and o hold the same transactions (and flavour).
func (s GTIDSet) Equal(o GTIDSet) bool {
	if s.flavor != o.flavor {
		return false
	}
	if s.flavor == MySQL {
		return s.mysql.Equal(o.mysql)
	}
	if len(s.domains) != len(o.domains) {
		return false
	}
	for d, g := range s.domains {
		if og, ok := o.domains[d]; !ok || og != g {
			return false
		}
	}
	return true
}

// Domain returns the last GTID of MariaDB domain d in the set.
func (s GTIDSet) Domain(d uint32) (GTID, bool) {
	g, ok := s.domains[d]
	return g, ok
}

// Domains returns the MariaDB GTIDs of the set by ascending domain.
func (s GTIDSet) Domains() []GTID {
	out := make([]GTID, 0, len(s.domains))
	for _, g := range s.domains {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Domain < out[j].Domain })
	return out
}

// Contains reports whether transaction g is in the set (was read).
func (s GTIDSet) Contains(g GTID) bool {
	if g.Flavor != s.flavor {
		return false
	}
	if s.flavor == MariaDB {
		last, ok := s.domains[g.Domain]
		return ok && g.Seq <= last.Seq
	}
	u, ok := s.mysql.Sets[g.UUID.String()]
	if !ok {
		return false
	}
	n := int64(g.Seq)
	for _, in := range u.Intervals {
		if n >= in.Start && n < in.Stop {
			return true
		}
	}
	return false
}

// ContainsSet reports whether every transaction of o is in s.
func (s GTIDSet) ContainsSet(o GTIDSet) bool {
	if s.flavor != o.flavor {
		return false
	}
	if s.flavor == MySQL {
		return s.mysql.Contain(o.mysql)
	}
	for d, og := range o.domains {
		g, ok := s.domains[d]
		if !ok || g.Seq < og.Seq {
			return false
		}
	}
	return true
}

// Add returns the set advanced by transaction g, the one just read.
// MariaDB: g becomes its domain's last GTID; a seq that does not move the
// domain forward is an error (out of order: gtid_strict_mode=OFF and two
// servers writing one domain), since the position could not say which of
// the two was read. MySQL: g joins its UUID's intervals (any order).
func (s GTIDSet) Add(g GTID) (GTIDSet, error) {
	if g.Flavor != s.flavor {
		return GTIDSet{}, fmt.Errorf("cannot add %s GTID %s to a %s GTID set", g.Flavor, g, s.flavor)
	}
	if s.flavor == MariaDB {
		if last, ok := s.domains[g.Domain]; ok && g.Seq <= last.Seq {
			return GTIDSet{}, fmt.Errorf("GTID %s is out of order: domain %d is already at %s (turn gtid_strict_mode on at the source)", g, g.Domain, last)
		}
		out := GTIDSet{flavor: MariaDB, domains: make(map[uint32]GTID, len(s.domains)+1)}
		for d, v := range s.domains {
			out.domains[d] = v
		}
		out.domains[g.Domain] = g
		return out, nil
	}
	c := s.mysql.Clone().(*gomysql.MysqlGTIDSet)
	c.AddGTID(g.UUID, int64(g.Seq))
	return GTIDSet{flavor: MySQL, mysql: c}, nil
}

// GoMySQL returns the set as go-mysql's type, for BinlogSyncer.StartSyncGTID.
func (s GTIDSet) GoMySQL() gomysql.GTIDSet {
	if s.flavor == MySQL {
		return s.mysql.Clone()
	}
	out := &gomysql.MariadbGTIDSet{Sets: map[uint32]map[uint32]*gomysql.MariadbGTID{}}
	for d, g := range s.domains {
		out.Sets[d] = map[uint32]*gomysql.MariadbGTID{g.ServerID: {DomainID: d, ServerID: g.ServerID, SequenceNumber: g.Seq}}
	}
	return out
}

// BinlogIndex returns the number a binlog file name ends with
// ("mysql-bin.000007" -> 7): the high 32 bits of a change.Position.LSN.
func BinlogIndex(file string) (uint32, error) {
	i := strings.LastIndexByte(file, '.')
	if i < 0 || i == len(file)-1 {
		return 0, fmt.Errorf("binlog file name %q does not end in .<number>", file)
	}
	n, err := strconv.ParseUint(file[i+1:], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("binlog file name %q does not end in .<number>: %v", file, err)
	}
	return uint32(n), nil
}

// PositionLSN encodes a binlog coordinate as the sortable integer tidemark
// stores as the commit position (change.Position.LSN, cdc_source_lsn):
// fileIndex<<32 | pos. Within one server's binlog it grows with every event.
func PositionLSN(file string, pos uint32) (uint64, error) {
	idx, err := BinlogIndex(file)
	if err != nil {
		return 0, err
	}
	return uint64(idx)<<32 | uint64(pos), nil
}

// SplitLSN is PositionLSN's inverse: the file index and the position.
func SplitLSN(lsn uint64) (fileIndex, pos uint32) {
	return uint32(lsn >> 32), uint32(lsn)
}

// Resume is where a MySQL/MariaDB stream resumes, and on which server: the
// source's part of pipeline.Checkpoint.Resume (String/ParseResume).
//
// GTID is the set read so far (empty when the server has GTIDs off: MySQL
// gtid_mode=OFF); File and Pos are the binlog coordinate after the last
// transaction read, on the server identified by ServerID and ServerUUID
// (MySQL only; MariaDB has none). A stream resumes by GTID when it has one,
// else by File/Pos.
type Resume struct {
	Flavor     Flavor
	GTID       GTIDSet
	File       string
	Pos        uint32
	ServerID   uint32
	ServerUUID string
}

// String formats r as a resume token:
//
//	mariadb;gtid=0-1-17,1-5-3;file=mysql-bin.000007;pos=1234;server_id=1
//	mysql;gtid=<uuid>:1-20;file=binlog.000002;pos=4711;server_id=1;server_uuid=<uuid>
func (r Resume) String() string {
	gtid := ""
	if r.GTID.flavor != "" && !r.GTID.IsEmpty() {
		gtid = r.GTID.String()
	}
	return r.token(gtid)
}

// token is String with r.GTID already rendered as gtid ("": none).
func (r Resume) token(gtid string) string {
	b := make([]byte, 0, 64+len(gtid)+len(r.File)+len(r.ServerUUID))
	b = append(b, r.Flavor...)
	if gtid != "" {
		b = append(append(b, ";gtid="...), gtid...)
	}
	if r.File != "" {
		b = append(append(b, ";file="...), r.File...)
		b = strconv.AppendUint(append(b, ";pos="...), uint64(r.Pos), 10)
	}
	b = strconv.AppendUint(append(b, ";server_id="...), uint64(r.ServerID), 10)
	if r.ServerUUID != "" {
		b = append(append(b, ";server_uuid="...), r.ServerUUID...)
	}
	return string(b)
}

// ParseResume parses a token written by Resume.String.
func ParseResume(s string) (Resume, error) {
	parts := strings.Split(s, ";")
	r := Resume{Flavor: Flavor(parts[0])}
	if !r.Flavor.valid() {
		return Resume{}, fmt.Errorf("invalid MySQL resume token %q: it does not start with mariadb or mysql", s)
	}
	r.GTID, _ = ParseGTIDSet(r.Flavor, "")
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || seen[k] {
			return Resume{}, fmt.Errorf("invalid MySQL resume token %q: bad or repeated field %q", s, p)
		}
		seen[k] = true
		var err error
		switch k {
		case "gtid":
			r.GTID, err = ParseGTIDSet(r.Flavor, v)
		case "file":
			if v == "" {
				err = fmt.Errorf("empty file")
			}
			r.File = v
		case "pos":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			r.Pos = uint32(n)
		case "server_id":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			r.ServerID = uint32(n)
		case "server_uuid":
			r.ServerUUID = v
		default:
			err = fmt.Errorf("unknown field")
		}
		if err != nil {
			return Resume{}, fmt.Errorf("invalid MySQL resume token %q: field %q: %v", s, p, err)
		}
	}
	if seen["file"] != seen["pos"] {
		return Resume{}, fmt.Errorf("invalid MySQL resume token %q: file and pos go together", s)
	}
	if !seen["server_id"] {
		return Resume{}, fmt.Errorf("invalid MySQL resume token %q: no server_id", s)
	}
	if r.GTID.IsEmpty() && r.File == "" {
		return Resume{}, fmt.Errorf("invalid MySQL resume token %q: neither a GTID set nor a binlog file", s)
	}
	return r, nil
}
