package silver

import "slices"

// This file is the heart of a merge, with no I/O: the fold of one key's
// changes into the row silver must hold afterwards. Rows are not copied
// here; the fold only decides, column by column, which input row supplies
// each value (a "ref": the row's index in the merge's input, bronze rows
// first, then the silver rows read back). merge.go builds the output
// columns from those refs.

// pos is a source position: the commit position of the change's
// transaction, then the change's order inside it (ARCHITECTURE §1.4).
type pos struct{ lsn, seq int64 }

func (p pos) less(q pos) bool {
	if p.lsn != q.lsn {
		return p.lsn < q.lsn
	}
	return p.seq < q.seq
}

// Change operations, as bronze's cdc_op spells them.
const (
	opRead     = 'r'
	opInsert   = 'c'
	opUpdate   = 'u'
	opDelete   = 'd'
	opTruncate = 't'
)

// change is one bronze row of a key.
type change struct {
	pos pos
	op  byte
	key int32 // the key's index in the merge's keyIndex
	ref int   // the bronze row
	// unchanged lists the source columns (indices into the silver table's
	// source columns) the source did not send: TOAST values left as they were.
	unchanged []int
	// from supplies unchanged columns from another key's row: the insert
	// half of a key change takes them from the row the delete half removed.
	from map[int]int
}

// prior is the row silver holds for a key before the merge.
type prior struct {
	pos     pos
	ref     int
	deleted bool // a soft-delete tombstone, not a live row
}

type action int

const (
	// keep: the key's silver row stays as it is (no change applies, or the
	// changes could not be applied: see outcome.holes).
	keep action = iota
	// drop: the key has no row afterwards.
	drop
	// put: the key's row is replaced by (or created as) the outcome's row.
	put
)

// outcome is the fold's verdict for one key.
type outcome struct {
	act action
	// base supplies every source column of a put row, except the columns
	// in fill, which TOAST-unchanged changes carried over from an earlier row.
	base int
	fill map[int]int
	// meta supplies the position columns (cdc_source_lsn, cdc_seq, cdc_ts):
	// the last change applied.
	meta int
	// deleted marks a put row as a soft-delete tombstone.
	deleted bool
	// applied counts the changes that took effect; ignored those at or below
	// the silver row's position (already merged: a replay) or below a
	// truncate.
	applied, ignored int
	// holes, when not empty, are the changes that left a column unfillable
	// (TOAST-unchanged with no earlier state of the row anywhere) and that
	// nothing later superseded. Such a key is never merged half-empty: act
	// is keep, and each listed change goes to the dead-letter table.
	holes []hole
}

// hole names a change whose unchanged columns could not be filled.
type hole struct {
	change int // index into the fold's changes
	cols   []int
}

// source returns the ref supplying source column col of a put row.
func (o *outcome) source(col int) int {
	if r, ok := o.fill[col]; ok {
		return r
	}
	return o.base
}

// state is a key's row as the fold goes.
type state struct {
	present bool // a live row
	tomb    bool // a soft-delete tombstone (contents kept)
	base    int
	fill    map[int]int
	holes   map[int]int // column -> the change that left it unfilled
	meta    int         // the last change applied
	applied int
	ignored int
}

// source returns the ref supplying source column col of the state's row.
func (s *state) source(col int) int {
	if r, ok := s.fill[col]; ok {
		return r
	}
	return s.base
}

// fold folds one key's changes into its final row, in position order.
//
//   - p is the row silver holds (nil if none);
//   - trunc is the position of the last TRUNCATE in the merged range (nil if
//     none): it voids every row and change below it, p included;
//   - a change at or below p's position is ignored (highest position wins;
//     replaying a merged range changes nothing);
//   - r, c and u set the row; their unchanged columns come from the key's
//     previous state, from earlier in the range or else from p (or, for the
//     insert half of a key change, from change.from);
//   - d deletes the row. With soft deletes the last known contents stay as a
//     tombstone (deleted = true) positioned at the delete; when no earlier
//     state is known, the delete's own values are the contents (with REPLICA
//     IDENTITY FULL that is the whole old row, else only the key).
//
// cs is sorted by position in place (stable: bronze never holds two
// changes at one position, but nothing is reordered needlessly).
func fold(p *prior, cs []change, trunc *pos, soft bool) outcome {
	st := foldState(p, cs, trunc, soft)
	o := outcome{base: -1, meta: -1, applied: st.applied, ignored: st.ignored}
	if st.applied == 0 {
		return o // keep
	}
	if (st.present || st.tomb) && len(st.holes) > 0 {
		byChange := map[int][]int{}
		for col, ch := range st.holes {
			byChange[ch] = append(byChange[ch], col)
		}
		for ch, cols := range byChange {
			slices.Sort(cols)
			o.holes = append(o.holes, hole{change: ch, cols: cols})
		}
		slices.SortFunc(o.holes, func(a, b hole) int { return a.change - b.change })
		return o // keep
	}
	switch {
	case st.present || st.tomb:
		o.act, o.base, o.fill, o.meta, o.deleted = put, st.base, st.fill, st.meta, st.tomb
	default:
		o.act = drop
	}
	return o
}

// foldState runs the fold and returns the key's state after the last change.
func foldState(p *prior, cs []change, trunc *pos, soft bool) state {
	if len(cs) > 1 {
		slices.SortStableFunc(cs, func(a, b change) int {
			switch {
			case a.pos.less(b.pos):
				return -1
			case b.pos.less(a.pos):
				return 1
			}
			return 0
		})
	}
	live := p != nil && (trunc == nil || trunc.less(p.pos))
	// holes and fill stay nil until a change needs them: most keys of a
	// merge have one change with no unchanged column.
	st := state{base: -1, meta: -1}
	if live {
		st.base = p.ref
		st.present, st.tomb = !p.deleted, p.deleted
	}
	for i, c := range cs {
		if (trunc != nil && !trunc.less(c.pos)) || (live && !p.pos.less(c.pos)) {
			st.ignored++
			continue
		}
		switch c.op {
		case opRead, opInsert, opUpdate:
			var nfill, nholes map[int]int
			setHole := func(col, ch int) {
				if nholes == nil {
					nholes = map[int]int{}
				}
				nholes[col] = ch
			}
			for _, col := range c.unchanged {
				from, ok := c.from[col]
				switch {
				case ok:
				case !st.present:
					setHole(col, i)
					continue
				default:
					if h, hole := st.holes[col]; hole {
						setHole(col, h)
						continue
					}
					from = st.source(col)
				}
				if nfill == nil {
					nfill = map[int]int{}
				}
				nfill[col] = from
			}
			st.present, st.tomb = true, false
			st.base, st.fill, st.holes = c.ref, nfill, nholes
		case opDelete:
			switch {
			case !soft:
				st.base, st.fill, st.holes = -1, nil, nil
			case !st.present && !st.tomb:
				st.base, st.fill, st.holes = c.ref, nil, nil
			}
			st.present, st.tomb = false, soft
		default:
			// Unknown operations are routed to the dead-letter table before
			// the fold; never guess what one means.
			st.ignored++
			continue
		}
		st.meta = c.ref
		st.applied++
	}
	return st
}
