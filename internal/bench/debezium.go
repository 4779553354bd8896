package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The Debezium peer of scenario 1 (Options.Debezium, --debezium): Debezium's
// embedded engine with its PostgreSQL connector and a consumer that only
// counts (debezium/CountingEngine.java), run one after the other with
// tidemark and the baselines on the same WAL range of the same database,
// from its own pgoutput slot and its own publication of the same tables.
//
// Its classpath is Maven's: debezium/pom.xml is copied into a directory of
// the cache (Options.CacheDir, keyed by a hash of the pom and the Java
// source), `mvn -q -B dependency:copy-dependencies` fills lib/ and javac
// compiles the main against it; the next run reuses the directory. Without
// java, javac or mvn, or when Maven cannot resolve the artifacts, the peer
// is skipped with the reason in the table: the rest of the run goes on.
//
// When it is done: the connector confirms to its slot the commit position of
// the offset it last flushed, and an offset is that of the last *record*
// handled, which carries the commit LSN of the transaction before it (the
// commit message of a transaction makes no record). So the slot does not
// pass the end of the backlog (the harness's sentinel) until some record
// follows the sentinel's commit: without heartbeats, never. The sentinel is a
// transactional logical message, which Debezium turns into a record (it asks
// pgoutput for messages on PostgreSQL ≥ 14), and that record's offset carries
// the end of the last workload commit. Done is therefore confirmed_flush_lsn
// ≥ the end of the last workload commit record, found in the WAL with
// pg_walinspect, and no earlier: everything of the workload has been handed
// to the consumer and acknowledged. Offsets are flushed every second
// (offset.flush.interval.ms=1000), which bounds the error of the time.

//go:embed debezium/pom.xml debezium/CountingEngine.java
var debeziumFiles embed.FS

// DebeziumVersion is the Debezium release debezium/pom.xml names.
const DebeziumVersion = "3.6.1.Final"

// debeziumPublication is the peer's own publication, of the same tables
// as the one tidemark reads (FOR ALL TABLES).
const debeziumPublication = "bench_dbz_pub"

// debeziumPeer is a runnable Debezium: the java binary and a classpath.
type debeziumPeer struct {
	java      string
	classpath string
	dir       string // the cache directory it was prepared in
}

// prepareDebezium prepares the classpath in cacheDir (reused when already
// prepared: then only java is needed, else javac and mvn too). Any error
// means the peer cannot run here; it says why.
func prepareDebezium(ctx context.Context, cacheDir string, logf func(string, ...any)) (*debeziumPeer, error) {
	tools := map[string]string{}
	need := func(names ...string) error {
		for _, t := range names {
			p, err := exec.LookPath(t)
			if err != nil {
				return fmt.Errorf("%s not found in PATH (the Debezium peer needs Java 17+ and Maven)", t)
			}
			tools[t] = p
		}
		return nil
	}
	if err := need("java"); err != nil {
		return nil, err
	}
	h := sha256.New()
	var files []string
	for _, name := range []string{"debezium/pom.xml", "debezium/CountingEngine.java"} {
		b, err := debeziumFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		h.Write(b)
		files = append(files, name)
	}
	abs, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(abs, "debezium-"+DebeziumVersion+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	peer := &debeziumPeer{java: tools["java"], classpath: filepath.Join(dir, "classes") + string(os.PathListSeparator) + filepath.Join(dir, "lib", "*"), dir: dir}
	ready := filepath.Join(dir, "ready")
	if _, err := os.Stat(ready); err == nil {
		return peer, nil
	}
	// Not prepared yet: Maven resolves, javac compiles.
	if err := need("javac", "mvn"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache directory for the Debezium peer: %w", err)
	}
	for _, name := range files {
		b, _ := debeziumFiles.ReadFile(name)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), b, 0o644); err != nil {
			return nil, err
		}
	}
	run := func(what string, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, tools[name], args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s (%s %s in %s): %w\n%s", what, name, strings.Join(args, " "), dir, err, tail(string(out), 2000))
		}
		return nil
	}
	logf("Debezium peer: resolving Debezium %s with Maven into %s", DebeziumVersion, dir)
	if err := run("resolve Debezium "+DebeziumVersion+" with Maven", "mvn", "-q", "-B", "dependency:copy-dependencies", "-DoutputDirectory=lib"); err != nil {
		return nil, err
	}
	if err := run("compile CountingEngine.java", "javac", "-nowarn", "-cp", filepath.Join("lib", "*"), "-d", "classes", "CountingEngine.java"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ready, []byte(DebeziumVersion+"\n"), 0o644); err != nil {
		return nil, err
	}
	return peer, nil
}

// debeziumConfig is what one engine run is given.
type debeziumConfig struct {
	Name        string
	Host        string
	Port        int
	User        string
	Password    string
	DB          string
	Slot        string
	Publication string
	OffsetFile  string
}

// properties renders the engine and connector configuration in
// java.util.Properties form, one key a line, sorted.
func (c debeziumConfig) properties() string {
	kv := map[string]string{
		"name":                         c.Name,
		"connector.class":              "io.debezium.connector.postgresql.PostgresConnector",
		"offset.storage":               "org.apache.kafka.connect.storage.FileOffsetBackingStore",
		"offset.storage.file.filename": c.OffsetFile,
		"offset.flush.interval.ms":     "1000",
		"database.hostname":            c.Host,
		"database.port":                strconv.Itoa(c.Port),
		"database.user":                c.User,
		"database.password":            c.Password,
		"database.dbname":              c.DB,
		"database.sslmode":             "disable",
		"topic.prefix":                 "bench",
		"plugin.name":                  "pgoutput",
		"slot.name":                    c.Slot,
		"publication.name":             c.Publication,
		"publication.autocreate.mode":  "disabled",
		// Only the WAL: the slot exists before the workload, and the
		// engine starts from its confirmed position.
		"snapshot.mode": "no_data",
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + escapeProperty(kv[k]) + "\n")
	}
	return b.String()
}

// escapeProperty escapes a value for a java.util.Properties file: a
// backslash, a line break, and a leading blank (which Properties.load would
// drop) are escaped; '=' and ':' need no escape in a value.
func escapeProperty(v string) string {
	var b strings.Builder
	for i, r := range v {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == ' ' && i == 0:
			b.WriteString(`\ `)
		case r > 0x7e:
			// Properties files are ISO-8859-1: anything else as \uXXXX.
			for _, u := range utf16Units(r) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func utf16Units(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	r -= 0x10000
	return []uint16{uint16(0xd800 + (r >> 10)), uint16(0xdc00 + (r & 0x3ff))}
}

// debeziumCount is what the engine reported at its end.
type debeziumCount struct {
	Records int64 // every record handed to the consumer
	Changes int64 // data change records (Debezium's envelope)
}

// errNoCount means the engine's output has no final count line.
var errNoCount = errors.New("no final count line (tidemark-debezium: records=… changes=…)")

// parseDebeziumCount finds the last count line CountingEngine printed in
// its output (mixed with Debezium's log): "tidemark-debezium: records=N
// changes=M". A failure line ("tidemark-debezium: engine failed: …") after
// the last count is returned as the error.
func parseDebeziumCount(out string) (debeziumCount, error) {
	const prefix = "tidemark-debezium: "
	var (
		c     debeziumCount
		found bool
		fail  string
	)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), prefix)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 2 && strings.HasPrefix(f[0], "records=") && strings.HasPrefix(f[1], "changes=") {
			r, err1 := strconv.ParseInt(strings.TrimPrefix(f[0], "records="), 10, 64)
			ch, err2 := strconv.ParseInt(strings.TrimPrefix(f[1], "changes="), 10, 64)
			if err1 != nil || err2 != nil || r < 0 || ch < 0 || ch > r {
				return debeziumCount{}, fmt.Errorf("malformed count line %q", sc.Text())
			}
			c, found, fail = debeziumCount{Records: r, Changes: ch}, true, ""
			continue
		}
		fail = rest
	}
	if err := sc.Err(); err != nil {
		return debeziumCount{}, err
	}
	if fail != "" {
		return debeziumCount{}, errors.New(fail)
	}
	if !found {
		return debeziumCount{}, errNoCount
	}
	return c, nil
}

// debeziumRun is the Debezium side of one workload of scenario 1.
type debeziumRun struct {
	b    *bench
	w    cdcWorkload
	peer *debeziumPeer
	// lastCommit is the end of the last workload commit record: done is
	// the slot's confirmed_flush_lsn at or past it.
	lastCommit uint64

	rates, ratios, tmRatios, rss, cpuPer []float64
	// firstConfirm is, per repetition, the seconds from the JVM's start
	// until its slot first moved: start-up plus the first offset flush, a
	// fixed cost that weighs on a small workload's rate.
	firstConfirm []float64
}

// newDebeziumRun prepares the peer's side of workload w (its publication,
// pg_walinspect) after w's setup, or returns nil when the peer is not
// wanted or cannot run here (then the table says why).
func (b *bench) newDebeziumRun(ctx context.Context, w cdcWorkload) (*debeziumRun, error) {
	if !b.opts.Debezium {
		return nil, nil
	}
	if b.dbzErr == nil && b.dbz == nil {
		b.dbz, b.dbzErr = prepareDebezium(ctx, b.opts.CacheDir, b.logf)
		if b.dbzErr != nil {
			b.logf("Debezium peer skipped: %v", b.dbzErr)
		}
	}
	if b.dbzErr != nil {
		reason := b.dbzErr.Error()
		if i := strings.IndexByte(reason, '\n'); i >= 0 {
			reason = reason[:i]
		}
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: w.id + "″ same, Debezium " + DebeziumVersion + " embedded engine",
			Tidemark: "not measured: " + reason, Baseline: "—", Ratio: "—", Target: "— (peer)", Met: "—",
		})
		return nil, nil
	}
	if err := b.srv.exec(ctx, w.db, `CREATE EXTENSION IF NOT EXISTS pg_walinspect;
		CREATE PUBLICATION `+debeziumPublication+` FOR ALL TABLES`); err != nil {
		return nil, fmt.Errorf("Debezium peer: %w", err)
	}
	return &debeziumRun{b: b, w: w, peer: b.dbz}, nil
}

func (d *debeziumRun) slot(r int) string {
	return fmt.Sprintf("dbz_%s_%d", d.w.db[len("cdc_"):], r)
}

// createSlots creates the peer's slot of every repetition, with the
// baselines' slots (before the workload).
func (d *debeziumRun) createSlots(ctx context.Context, reps int) error {
	for r := 1; r <= reps; r++ {
		if err := d.b.srv.createSlot(ctx, d.w.db, d.slot(r)); err != nil {
			return err
		}
	}
	return nil
}

// findLastCommit finds the end of the last commit record before the
// sentinel (position before), searching the WAL back from it.
func (d *debeziumRun) findLastCommit(ctx context.Context, start, before uint64) error {
	from := start
	const window = 8 << 20
	if before > start+window {
		from = before - window
	}
	n, err := d.b.srv.queryInt(ctx, d.w.db, `SELECT COALESCE(max((end_lsn - '0/0'::pg_lsn)::bigint), 0)
		FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
		WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'`, formatLSN(from), formatLSN(before))
	if err != nil {
		return fmt.Errorf("Debezium peer: find the last workload commit: %w", err)
	}
	if n <= 0 || uint64(n) <= start {
		return fmt.Errorf("Debezium peer: no commit record in the WAL between %s and %s", formatLSN(from), formatLSN(before))
	}
	d.lastCommit = uint64(n)
	return nil
}

// run runs the engine of repetition r until its slot passes the last
// workload commit, timed from the JVM's start (its rate, peak RSS and CPU
// are recorded; pair adds the ratios once the repetition ends). changes is
// what the workload made: the engine must have handed at least that many
// data changes to its consumer.
func (d *debeziumRun) run(ctx context.Context, r int, changes int64) error {
	b := d.b
	name := fmt.Sprintf("debezium_%s_%d", d.w.db[len("cdc_"):], r)
	dir := filepath.Join(b.opts.WorkDir, "debezium", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := debeziumConfig{
		Name: name, Host: b.srv.pg.Host, Port: b.srv.pg.Port, User: "postgres", Password: b.srv.pg.Password,
		DB: d.w.db, Slot: d.slot(r), Publication: debeziumPublication, OffsetFile: filepath.Join(dir, "offsets.dat"),
	}
	props := filepath.Join(dir, "engine.properties")
	if err := os.WriteFile(props, []byte(cfg.properties()), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(b.opts.WorkDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	conn, err := b.srv.connect(ctx, d.w.db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	cmd := exec.Command(d.peer.java, "-cp", d.peer.classpath, "CountingEngine", props)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start Debezium %s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logTail := func() string {
		out, _ := os.ReadFile(logPath)
		return tail(string(out), 3000)
	}
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	deadline := start.Add(2 * time.Hour)
	var (
		took, first time.Duration
		initial     int64 = -1
	)
	for {
		var confirmed int64
		err := conn.QueryRow(ctx, `SELECT COALESCE((confirmed_flush_lsn - '0/0'::pg_lsn)::bigint, 0)
			FROM pg_replication_slots WHERE slot_name = $1`, d.slot(r)).Scan(&confirmed)
		if err != nil {
			kill()
			return fmt.Errorf("Debezium %s: read its slot %s: %w", name, d.slot(r), err)
		}
		if initial < 0 {
			initial = confirmed
		} else if first == 0 && confirmed > initial {
			first = time.Since(start)
		}
		if uint64(confirmed) >= d.lastCommit {
			took = time.Since(start)
			if first == 0 {
				first = took
			}
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("Debezium %s exited (%v) before its slot passed %s (log %s):\n%s", name, err, formatLSN(d.lastCommit), logPath, logTail())
		case <-ctx.Done():
			kill()
			return ctx.Err()
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			kill()
			return fmt.Errorf("Debezium %s: slot %s did not pass %s within 2 h (confirmed %s; log %s)", name, d.slot(r), formatLSN(d.lastCommit), formatLSN(uint64(confirmed)), logPath)
		}
	}
	peak, err := peakRSSOf(cmd.Process.Pid)
	if err != nil {
		kill()
		return fmt.Errorf("Debezium %s: %w", name, err)
	}
	cpu, err := (&pipeline{name: name, cmd: cmd}).cpuTime()
	if err != nil {
		kill()
		return err
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("Debezium %s did not stop cleanly: %w (log %s):\n%s", name, err, logPath, logTail())
		}
	case <-time.After(time.Minute):
		kill()
		return fmt.Errorf("Debezium %s did not stop within a minute of SIGTERM (killed); log %s", name, logPath)
	}
	out, err := os.ReadFile(logPath)
	if err != nil {
		return err
	}
	cnt, err := parseDebeziumCount(string(out))
	if err != nil {
		return fmt.Errorf("Debezium %s: %w (log %s)", name, err, logPath)
	}
	// Its slot passed the last workload commit, so every workload change
	// has been handed over; more can come after the sentinel (the other
	// consumers of the repetition write their own WAL, e.g. tidemark's
	// heartbeat messages), which is why records exceed changes + 1.
	if cnt.Changes < changes {
		return fmt.Errorf("Debezium %s handed %d data changes to its consumer, the workload made %d (log %s)", name, cnt.Changes, changes, logPath)
	}
	rt := float64(changes) / took.Seconds()
	d.rates, d.firstConfirm = append(d.rates, rt), append(d.firstConfirm, first.Seconds())
	d.rss, d.cpuPer = append(d.rss, float64(peak)), append(d.cpuPer, float64(cpu.Microseconds())/float64(changes))
	b.logf("%s rep %d: Debezium %s (%s, %d records; slot first confirmed after %s), peak RSS %s", d.w.label, r, ms(took), rate(rt, "changes"), cnt.Records, ms(first), mib(peak))
	return nil
}

// pair records the ratios of the repetition just run: Debezium's rate
// against pg_recvlogical's (recvRate) and tidemark's (tmRate) in it.
func (d *debeziumRun) pair(recvRate, tmRate float64) {
	rt := d.rates[len(d.rates)-1]
	d.ratios, d.tmRatios = append(d.ratios, rt/recvRate), append(d.tmRatios, tmRate/rt)
}

// report adds the peer's row and details; tmRatio is tidemark's median
// ratio to pg_recvlogical in the same run.
func (d *debeziumRun) report(recvRates []float64, tmRatio float64) {
	b := d.b
	peak := slices.Max(d.rss)
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: d.w.id + "″ same WAL and tables, Debezium " + DebeziumVersion + " embedded engine (PostgreSQL connector, pgoutput, counting consumer, file offsets flushed every 1 s), one after the other with tidemark",
		Tidemark: "Debezium: " + rate(median(d.rates), "changes") + ", peak RSS " + mib(int64(peak)),
		Baseline: rate(median(recvRates), "changes") + " (pg_recvlogical)",
		Ratio:    ratio(median(d.ratios)),
		Target:   "— (peer; tidemark " + ratio(tmRatio) + ")",
		Met:      "—",
	})
	chg := func(v float64) string { return rate(v, "changes") }
	secs := func(v float64) string { return fmt.Sprintf("%.1f s", v) }
	b.detail("%s″ Debezium %s per rep: %s; ratios to pg_recvlogical: %s; tidemark ÷ Debezium: %s; Debezium CPU per change: %s µs; JVM peak RSS per rep: %s (default JVM heap settings); "+
		"its slot first confirmed after (JVM and engine start, first offset flush): %s; done = slot confirmed_flush_lsn ≥ %s, the end of the last workload commit",
		d.w.id, DebeziumVersion, spread(d.rates, chg), spread(d.ratios, ratio), spread(d.tmRatios, ratio), spread(d.cpuPer, micro),
		spread(d.rss, func(v float64) string { return mib(int64(v)) }), spread(d.firstConfirm, secs), formatLSN(d.lastCommit))
}
