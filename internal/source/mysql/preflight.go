package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/tidemark/tidemark/internal/fault"
)

// BinlogFile is one of the server's binary logs (SHOW BINARY LOGS).
type BinlogFile struct {
	Name string
	Size int64
}

// ServerInfo is what Preflight learned about the source server.
type ServerInfo struct {
	Flavor     Flavor
	Version    string // SELECT VERSION()
	ServerID   uint32 // @@server_id
	ServerUUID string // MySQL @@server_uuid; "" on MariaDB, which has none
	// GTIDMode: the server gives every transaction a GTID (MariaDB always;
	// MySQL with gtid_mode=ON). Without it a stream resumes by file:pos.
	GTIDMode       bool
	GTIDStrictMode bool   // MariaDB @@gtid_strict_mode
	GTIDDomainID   uint32 // MariaDB @@gtid_domain_id
	// GTIDExecuted is what the binlog holds up to now: MariaDB
	// @@gtid_binlog_pos (the last GTID per domain), MySQL @@gtid_executed.
	GTIDExecuted GTIDSet
	// GTIDPurged is what is no longer in the binlog: MySQL @@gtid_purged;
	// MariaDB the GTID position at the start of the oldest binlog file
	// (BINLOG_GTID_POS(oldest, 4)): a domain's transactions up to its seq
	// there are gone.
	GTIDPurged GTIDSet
	Binlogs    []BinlogFile // oldest first
	BinlogFile string       // the binlog being written (SHOW MASTER STATUS)
	BinlogPos  uint32       // its end
	// Variables are the server settings Preflight read, by name (absent:
	// the server does not have the variable).
	Variables map[string]string
	// Warnings are advice that does not stop tidemark, one sentence each
	// with the fix (gtid_strict_mode=OFF, gtid_mode=OFF, short binlog
	// retention). The caller logs them.
	Warnings []string
}

// Position returns the binlog coordinate and GTID set of the server's
// current end, as a Resume a stream started now would begin from.
func (s ServerInfo) Position() Resume {
	return Resume{Flavor: s.Flavor, GTID: s.GTIDExecuted, File: s.BinlogFile, Pos: s.BinlogPos,
		ServerID: s.ServerID, ServerUUID: s.ServerUUID}
}

// variables Preflight reads (SHOW GLOBAL VARIABLES: a variable the server
// lacks is simply absent).
var preflightVariables = []string{
	"version", "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
	"binlog_row_value_options", "server_id", "server_uuid", "gtid_mode", "enforce_gtid_consistency",
	"gtid_strict_mode", "gtid_domain_id", "gtid_binlog_pos", "gtid_executed", "gtid_purged",
	"binlog_expire_logs_seconds", "expire_logs_days",
}

// Preflight checks, before anything is read or created, that the source
// server can be captured by the user db is connected as, and returns what
// it learned. Settings that must change are one server_config error (exit
// 2) naming each setting with the statement that fixes it: log_bin on,
// binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL (so
// that row events carry column names across DDL), no PARTIAL_JSON row
// values, a non-zero server_id. Missing grants are one permission_denied
// error (exit 3) naming the GRANT to run: REPLICATION SLAVE (read the
// binlog), REPLICATION CLIENT or, on MariaDB, BINLOG MONITOR (list the
// binlogs and the position) and SELECT on the database (snapshots).
func Preflight(ctx context.Context, db *sql.DB) (ServerInfo, error) {
	info, err := readServer(ctx, db)
	if err != nil {
		return info, err
	}
	if err := checkSettings(info); err != nil {
		return info, err
	}
	grantWarning, err := checkGrants(ctx, db, info.Flavor)
	if err != nil {
		return info, err
	}
	if err := readBinlogs(ctx, db, &info); err != nil {
		if grantWarning != "" && errors.Is(err, fault.ErrPermissionDenied) {
			err = fault.With(fault.ErrPermissionDenied, grantWarning, err)
		}
		return info, err
	}
	info.Warnings = advice(info)
	if grantWarning != "" {
		info.Warnings = append(info.Warnings, grantWarning)
	}
	return info, nil
}

// readServer reads the version and the variables.
func readServer(ctx context.Context, db *sql.DB) (ServerInfo, error) {
	var info ServerInfo
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&info.Version); err != nil {
		return info, Classify(fmt.Errorf("read the source server's version: %w", err))
	}
	info.Flavor = FlavorOf(info.Version)
	q := "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('" + strings.Join(preflightVariables, "','") + "')"
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return info, Classify(fmt.Errorf("read the source server's settings: %w", err))
	}
	defer rows.Close()
	info.Variables = map[string]string{}
	for rows.Next() {
		var k string
		var v sql.NullString
		if err := rows.Scan(&k, &v); err != nil {
			return info, Classify(fmt.Errorf("read the source server's settings: %w", err))
		}
		info.Variables[strings.ToLower(k)] = v.String
	}
	if err := rows.Err(); err != nil {
		return info, Classify(fmt.Errorf("read the source server's settings: %w", err))
	}
	v := info.Variables
	if id, err := strconv.ParseUint(v["server_id"], 10, 32); err == nil {
		info.ServerID = uint32(id)
	}
	info.ServerUUID = strings.ToLower(v["server_uuid"])
	if info.Flavor == MariaDB {
		info.GTIDMode = true
		info.GTIDStrictMode = on(v["gtid_strict_mode"])
		if d, err := strconv.ParseUint(v["gtid_domain_id"], 10, 32); err == nil {
			info.GTIDDomainID = uint32(d)
		}
		if info.GTIDExecuted, err = ParseGTIDSet(MariaDB, v["gtid_binlog_pos"]); err != nil {
			return info, fmt.Errorf("the source's @@gtid_binlog_pos: %w", err)
		}
		info.GTIDPurged, _ = ParseGTIDSet(MariaDB, "")
	} else {
		info.GTIDMode = strings.EqualFold(v["gtid_mode"], "ON")
		if info.GTIDExecuted, err = ParseGTIDSet(MySQL, v["gtid_executed"]); err != nil {
			return info, fmt.Errorf("the source's @@gtid_executed: %w", err)
		}
		if info.GTIDPurged, err = ParseGTIDSet(MySQL, v["gtid_purged"]); err != nil {
			return info, fmt.Errorf("the source's @@gtid_purged: %w", err)
		}
	}
	return info, nil
}

func on(v string) bool { return v == "1" || strings.EqualFold(v, "ON") }

// checkSettings returns one server_config error naming every setting that
// must change.
func checkSettings(info ServerInfo) error {
	v := info.Variables
	var problems []string
	persist := "in the server's my.cnf ([mysqld])"
	if !on(v["log_bin"]) {
		problems = append(problems, "log_bin is OFF: tidemark reads the binary log; start the server with log_bin (log_bin = mysql-bin "+persist+", needs a restart)")
	}
	if f := v["binlog_format"]; !strings.EqualFold(f, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format = %s, and tidemark needs ROW (row events carry the changed rows; statements cannot be replayed): run SET GLOBAL binlog_format = 'ROW' and set binlog_format = ROW %s; sessions already open keep their format until they reconnect", f, persist))
	}
	if img := v["binlog_row_image"]; !strings.EqualFold(img, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image = %s, and tidemark needs FULL (every column of the row before and after a change, or silver loses the columns a change did not touch): run SET GLOBAL binlog_row_image = 'FULL' and set it %s", img, persist))
	}
	if md, ok := v["binlog_row_metadata"]; !ok {
		server := "MariaDB 10.5"
		if info.Flavor == MySQL {
			server = "MySQL 8.0.1"
		}
		problems = append(problems, fmt.Sprintf("the server (%s) has no binlog_row_metadata setting, which tidemark needs (= FULL: column names in the row events, to follow columns across DDL): upgrade to %s or later", info.Version, server))
	} else if !strings.EqualFold(md, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_metadata = %s, and tidemark needs FULL (column names in the row events, to follow columns across DDL): run SET GLOBAL binlog_row_metadata = 'FULL' and set it %s", md, persist))
	}
	if opts := v["binlog_row_value_options"]; strings.Contains(strings.ToUpper(opts), "PARTIAL_JSON") {
		problems = append(problems, "binlog_row_value_options = PARTIAL_JSON writes JSON updates as diffs, not full values: run SET GLOBAL binlog_row_value_options = '' and remove it "+persist)
	}
	if info.ServerID == 0 {
		problems = append(problems, "server_id = 0: a server without a server_id does not serve replicas; set server_id to a number unique among your servers "+persist+" (needs a restart)")
	}
	if len(problems) == 0 {
		return nil
	}
	return fault.With(fault.ErrServerConfig, "the source server is not set up for binlog capture: "+strings.Join(problems, "; ")+"; then rerun", nil)
}

// grantLine is one privilege list of SHOW GRANTS: "GRANT <privs> ON <object> TO ...".
type grantLine struct {
	privs  []string // upper case, column lists removed
	object string   // "*.*", "`db`.*", "`db`.`t`"
}

// parseGrant parses a SHOW GRANTS line; role grants (no ON) return false.
func parseGrant(line string) (grantLine, bool) {
	if !strings.HasPrefix(strings.ToUpper(line), "GRANT ") {
		return grantLine{}, false
	}
	rest := line[len("GRANT "):]
	// Find " ON " outside backquotes and parentheses.
	depth, quoted, on := 0, false, -1
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '`':
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && i+4 <= len(rest) && strings.EqualFold(rest[i:i+4], " ON "):
			on = i
		}
		if on >= 0 {
			break
		}
	}
	if on < 0 {
		return grantLine{}, false
	}
	var g grantLine
	var cur strings.Builder
	depth = 0
	flush := func() {
		if p := strings.ToUpper(strings.TrimSpace(cur.String())); p != "" {
			g.privs = append(g.privs, strings.Join(strings.Fields(p), " "))
		}
		cur.Reset()
	}
	for _, c := range rest[:on] {
		switch {
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth > 0:
		case c == ',':
			flush()
		default:
			cur.WriteRune(c)
		}
	}
	flush()
	obj := strings.TrimSpace(rest[on+4:])
	if i := strings.Index(strings.ToUpper(obj), " TO "); i >= 0 {
		obj = obj[:i]
	}
	// MySQL prints "ON PROCEDURE x", "ON FUNCTION x": not table grants.
	g.object = strings.TrimSpace(obj)
	return g, true
}

// checkGrants checks the privileges of the current user from SHOW GRANTS
// (and, on MariaDB, the grants to PUBLIC). Privileges that come through a
// role MySQL does not list there (SHOW GRANTS shows only "GRANT role TO
// user"): when the user has roles, what seems missing is a warning, and the
// server's own refusal later is still permission_denied (Classify).
func checkGrants(ctx context.Context, db *sql.DB, flavor Flavor) (warning string, err error) {
	var user sql.NullString
	var dbName sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER(), DATABASE()").Scan(&user, &dbName); err != nil {
		return "", Classify(fmt.Errorf("read the source user: %w", err))
	}
	lines, err := grantLines(ctx, db, "SHOW GRANTS")
	if err != nil {
		return "", Classify(fmt.Errorf("read the source user's grants (SHOW GRANTS): %w", err))
	}
	if flavor == MariaDB {
		if public, err := grantLines(ctx, db, "SHOW GRANTS FOR PUBLIC"); err == nil { // MariaDB >= 10.11
			lines = append(lines, public...)
		}
	}
	global := map[string]bool{}
	selectOnDB, roles := false, false
	for _, line := range lines {
		g, ok := parseGrant(line) // never logged: MariaDB prints the password hash
		if !ok {
			roles = roles || strings.HasPrefix(strings.ToUpper(line), "GRANT ")
			continue
		}
		for _, p := range g.privs {
			if g.object == "*.*" {
				global[p] = true
			} else if dbName.String != "" && (p == "SELECT" || p == "ALL" || p == "ALL PRIVILEGES") &&
				grantOnDB(g.object, dbName.String) {
				selectOnDB = true
			}
		}
	}
	has := func(privs ...string) bool {
		if global["ALL"] || global["ALL PRIVILEGES"] {
			return true
		}
		for _, p := range privs {
			if global[p] {
				return true
			}
		}
		return false
	}
	var missing []string
	if !has("REPLICATION SLAVE") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if flavor == MariaDB {
		if !has("BINLOG MONITOR", "REPLICATION CLIENT", "SUPER") {
			missing = append(missing, "BINLOG MONITOR")
		}
	} else if !has("REPLICATION CLIENT", "SUPER") {
		missing = append(missing, "REPLICATION CLIENT")
	}
	if !has("SELECT") && !selectOnDB {
		missing = append(missing, "SELECT")
	}
	if len(missing) == 0 {
		return "", nil
	}
	who := user.String
	if u, h, ok := strings.Cut(who, "@"); ok {
		who = fmt.Sprintf("'%s'@'%s'", u, h)
	}
	if roles {
		return fmt.Sprintf("the source user %s seems to lack %s (SHOW GRANTS does not list what its roles give): if it does, run GRANT %s ON *.* TO %s",
			who, strings.Join(missing, ", "), strings.Join(missing, ", "), who), nil
	}
	return "", fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
		"the source user %s lacks %s, which binlog capture needs: run GRANT %s ON *.* TO %s as an administrator, then rerun",
		who, strings.Join(missing, ", "), strings.Join(missing, ", "), who), nil)
}

func grantLines(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, err
		}
		out = append(out, line)
	}
	return out, rows.Err()
}

// grantOnDB reports whether a grant's object ("`db`.*", "`db`.`t`") is in database db.
func grantOnDB(object, db string) bool {
	schema, _, ok := strings.Cut(object, ".")
	if !ok {
		return false
	}
	schema = strings.Trim(schema, "`")
	schema = strings.ReplaceAll(schema, "``", "`")
	schema = strings.ReplaceAll(schema, `\_`, "_")
	return schema == db
}

// readBinlogs lists the binlogs, the current position and, on MariaDB, what
// the oldest binlog no longer has.
func readBinlogs(ctx context.Context, db *sql.DB, info *ServerInfo) error {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return Classify(fmt.Errorf("list the source's binary logs (SHOW BINARY LOGS): %w", err))
	}
	info.Binlogs, err = scanBinlogs(rows)
	if err != nil {
		return Classify(fmt.Errorf("list the source's binary logs: %w", err))
	}
	if len(info.Binlogs) == 0 {
		return fault.With(fault.ErrServerConfig, "the source server lists no binary logs although log_bin is on: check its binlog index file", nil)
	}
	if err := readMasterStatus(ctx, db, info); err != nil {
		return err
	}
	if info.Flavor == MariaDB {
		var pos sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", info.Binlogs[0].Name).Scan(&pos); err != nil {
			return Classify(fmt.Errorf("read the GTID position at the start of binlog %s: %w", info.Binlogs[0].Name, err))
		}
		if info.GTIDPurged, err = ParseGTIDSet(MariaDB, pos.String); err != nil {
			return fmt.Errorf("the GTID position at the start of binlog %s: %w", info.Binlogs[0].Name, err)
		}
	}
	return nil
}

func scanBinlogs(rows *sql.Rows) ([]BinlogFile, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []BinlogFile
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		f := BinlogFile{Name: vals[0].String}
		if len(vals) > 1 {
			f.Size, _ = strconv.ParseInt(vals[1].String, 10, 64)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// readMasterStatus reads the binlog being written and its end. MySQL 8.4
// dropped SHOW MASTER STATUS for SHOW BINARY LOG STATUS.
func readMasterStatus(ctx context.Context, db *sql.DB, info *ServerInfo) error {
	var lastErr error
	for _, q := range []string{"SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			lastErr = err
			if num, _, ok := ServerError(err); ok && num == 1064 { // syntax: the other spelling
				continue
			}
			break
		}
		files, err := scanBinlogs(rows)
		if err != nil {
			lastErr = err
			break
		}
		if len(files) == 0 {
			return fault.With(fault.ErrServerConfig, "the source server shows no binlog status although log_bin is on", nil)
		}
		info.BinlogFile, info.BinlogPos = files[0].Name, uint32(files[0].Size)
		return nil
	}
	return Classify(fmt.Errorf("read the source's binlog position (SHOW MASTER STATUS): %w", lastErr))
}

// advice returns the warnings for settings that work but are not what a
// production source should have.
func advice(info ServerInfo) []string {
	var w []string
	v := info.Variables
	if info.Flavor == MariaDB && !info.GTIDStrictMode {
		w = append(w, "gtid_strict_mode is OFF on the source: out-of-order GTIDs in a domain would stop the stream; run SET GLOBAL gtid_strict_mode = ON and set it in my.cnf")
	}
	if info.Flavor == MySQL && !info.GTIDMode {
		w = append(w, "gtid_mode is not ON on the source: tidemark resumes by binlog file and position, which do not carry over to another server after a failover; turn GTIDs on (gtid_mode = ON, enforce_gtid_consistency = ON) to resume by GTID")
	}
	if s, err := strconv.ParseInt(v["binlog_expire_logs_seconds"], 10, 64); err == nil && s > 0 && s < 24*3600 {
		w = append(w, fmt.Sprintf("binlog_expire_logs_seconds = %d: binlogs are purged after less than a day; a tidemark stopped for longer cannot resume (binlog_purged) — keep them for at least a few days", s))
	}
	return w
}

// CheckResume reads the server's binlog state and checks that a stream can
// resume at r on it (ServerInfo.CheckResume).
func CheckResume(ctx context.Context, db *sql.DB, r Resume) error {
	info, err := readServer(ctx, db)
	if err != nil {
		return err
	}
	if err := readBinlogs(ctx, db, &info); err != nil {
		return err
	}
	return info.CheckResume(r)
}

// CheckResume checks that a stream can resume at r on this server, with the
// named fatal error when it cannot, so that tidemark never jumps silently:
//   - server_changed: r was read from another server (flavour, server_uuid,
//     or on MariaDB server_id differ), or this server's binlog does not
//     have what r says was read (RESET MASTER, a restore from a backup);
//   - binlog_purged: transactions after r are no longer in the binlog.
//
// With a GTID set (and GTIDs on) only the GTIDs decide: a purged file
// does not matter when every transaction after r is in a later one.
// Without, r.File must still be listed and at least r.Pos long.
func (s ServerInfo) CheckResume(r Resume) error {
	recorded := fmt.Sprintf("tidemark's checkpoint was read from a %s server with server_id %d", r.Flavor, r.ServerID)
	if r.ServerUUID != "" {
		recorded += " and server_uuid " + r.ServerUUID
	}
	here := fmt.Sprintf("this is a %s server with server_id %d", s.Flavor, s.ServerID)
	if s.ServerUUID != "" {
		here += " and server_uuid " + s.ServerUUID
	}
	changed := func(why string) error {
		return fault.With(fault.ErrServerChanged, fmt.Sprintf(
			"the source server is not the one tidemark read: %s; %s (%s); positions of one server mean nothing on another: run tidemark resnapshot --all with the run flags, then tidemark run (or point --source back at the server it read)",
			why, recorded, here), nil)
	}
	switch {
	case r.Flavor != s.Flavor:
		return changed("its flavour differs")
	case r.ServerUUID != "" && s.ServerUUID != "" && !strings.EqualFold(r.ServerUUID, s.ServerUUID):
		return changed("its server_uuid differs")
	case s.Flavor == MariaDB && r.ServerID != s.ServerID:
		return changed("its server_id differs")
	}
	purged := func(what string) error {
		return fault.With(fault.ErrBinlogPurged, fmt.Sprintf(
			"the source no longer has the binlog tidemark must resume from (%s; oldest binlog %s): the changes since were purged before tidemark read them; run tidemark resnapshot --all with the run flags, then tidemark run, and keep binlogs longer (binlog_expire_logs_seconds)",
			what, s.oldest()), nil)
	}
	if !r.GTID.IsEmpty() && s.GTIDMode {
		if r.GTID.Flavor() != s.Flavor {
			return changed("its GTIDs are of another flavour")
		}
		if !s.GTIDExecuted.ContainsSet(r.GTID) {
			return changed(fmt.Sprintf("its binlog holds GTIDs %q, which lack some of the %q tidemark already read", s.GTIDExecuted, r.GTID))
		}
		if s.Flavor == MariaDB {
			for _, p := range s.GTIDPurged.Domains() {
				g, ok := r.GTID.Domain(p.Domain)
				if !ok || g.Seq < p.Seq {
					return purged(fmt.Sprintf("resume GTID position %q, but the binlog starts after %s in domain %d", r.GTID, p, p.Domain))
				}
			}
		} else if !r.GTID.ContainsSet(s.GTIDPurged) {
			return purged(fmt.Sprintf("resume GTID set %q, but the server purged %q", r.GTID, s.GTIDPurged))
		}
		return nil
	}
	if r.File == "" {
		return changed("tidemark's checkpoint has a GTID set, and GTIDs are off on this server")
	}
	idx, err := BinlogIndex(r.File)
	if err != nil {
		return fault.With(fault.ErrCorruptState, "tidemark's resume position is unreadable", err)
	}
	for _, f := range s.Binlogs {
		if f.Name != r.File {
			continue
		}
		if f.Size < int64(r.Pos) {
			return changed(fmt.Sprintf("its binlog %s is %d bytes long, and tidemark had read it up to %d", f.Name, f.Size, r.Pos))
		}
		return nil
	}
	if len(s.Binlogs) > 0 {
		if first, err := BinlogIndex(s.Binlogs[0].Name); err == nil && idx < first {
			return purged(fmt.Sprintf("resume position %s:%d", r.File, r.Pos))
		}
	}
	return changed(fmt.Sprintf("it has no binlog %s (its binlogs: %s)", r.File, s.binlogNames()))
}

func (s ServerInfo) oldest() string {
	if len(s.Binlogs) == 0 {
		return "none"
	}
	return s.Binlogs[0].Name
}

func (s ServerInfo) binlogNames() string {
	if len(s.Binlogs) == 0 {
		return "none"
	}
	if len(s.Binlogs) <= 3 {
		names := make([]string, len(s.Binlogs))
		for i, f := range s.Binlogs {
			names[i] = f.Name
		}
		return strings.Join(names, ", ")
	}
	return s.Binlogs[0].Name + " … " + s.Binlogs[len(s.Binlogs)-1].Name
}

// CheckServerID checks that replicaID, the server_id tidemark reads the
// binlog with, is free: not the source's own server_id and not that of
// another replica registered with the source (SHOW SLAVE HOSTS). A replica
// registered from reportHost, the host name tidemark registers with, is
// taken for tidemark's own previous connection (a killed tidemark's dump
// thread lingers until the server notices, and the server replaces it when
// the same server_id connects again). Listing replicas needs REPLICATION
// MASTER ADMIN on MariaDB and REPLICATION SLAVE on MySQL; without it only
// the source's own server_id is checked. An empty reportHost is this
// machine's host name, which go-mysql's BinlogSyncer registers with by
// default.
func CheckServerID(ctx context.Context, db *sql.DB, replicaID uint32, reportHost string) error {
	if reportHost == "" {
		reportHost, _ = os.Hostname()
	}
	var sid uint32
	if err := db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&sid); err != nil {
		return Classify(fmt.Errorf("read the source's server_id: %w", err))
	}
	conflict := func(who string) error {
		return fault.With(fault.ErrServerIDConflict, fmt.Sprintf(
			"tidemark's server_id %d is %s; the source serves one reader per server_id and would disconnect one of the two again and again: give this pipeline a server_id unique among the source's replicas",
			replicaID, who), nil)
	}
	if replicaID == 0 {
		return fault.With(fault.ErrServerIDConflict, "tidemark's server_id is 0, which a replica may not use: choose a server_id unique among the source's replicas", nil)
	}
	if replicaID == sid {
		return conflict("the source server's own server_id")
	}
	rows, err := db.QueryContext(ctx, "SHOW SLAVE HOSTS")
	if num, _, ok := ServerError(err); ok && num == 1064 { // MySQL 8.4 knows only SHOW REPLICAS
		rows, err = db.QueryContext(ctx, "SHOW REPLICAS")
	}
	if err != nil {
		if num, _, ok := ServerError(err); ok && (num == erSpecificAccessDenied || num == 1064) {
			return nil
		}
		return Classify(fmt.Errorf("list the source's replicas (SHOW SLAVE HOSTS): %w", err))
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return Classify(err)
	}
	var others []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return Classify(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[strings.ToLower(c)] = vals[i].String
		}
		id := row["server_id"]
		if id == strconv.FormatUint(uint64(replicaID), 10) && row["host"] != reportHost {
			others = append(others, fmt.Sprintf("%s:%s", row["host"], row["port"]))
		}
	}
	if err := rows.Err(); err != nil {
		return Classify(err)
	}
	if len(others) > 0 {
		sort.Strings(others)
		return conflict("used by another replica of the source (" + strings.Join(others, ", ") + ")")
	}
	return nil
}
