package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/tidemark/tidemark/cdc"
)

// Read the changes of one table until ten have arrived, a minute has
// passed, or the database has been idle for ten seconds, acknowledging
// each.
func Example() {
	src := exampleSource() // postgres://user:password@host:5432/shop
	ctx := context.Background()
	s, err := cdc.Open(ctx, cdc.Config{
		Source:      src,
		Tables:      []string{"public.orders"},
		MaxRecords:  10,
		MaxRuntime:  time.Minute,
		PollTimeout: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// The application changes rows (after Open: an ephemeral stream
	// starts at the source's current position).
	exampleWrite(src,
		"INSERT INTO orders VALUES (1, 9.99, '2024-05-06')",
		"UPDATE orders SET amount = 10.50 WHERE id = 1",
		"DELETE FROM orders WHERE id = 1")

	for seen := 0; seen < 3; seen++ { // the example stops after its three changes
		ev, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break // MaxRecords, MaxRuntime or PollTimeout
		}
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Op {
		case cdc.Insert, cdc.Update:
			fmt.Println(ev.Op, ev.Table, ev.After["id"], ev.After["amount"], ev.After["placed"].(time.Time).Format(time.DateOnly))
		case cdc.Delete:
			fmt.Println(ev.Op, ev.Table, ev.Before["id"])
		}
		if err := s.Ack(ev); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// c public.orders 1 9.99 2024-05-06
	// u public.orders 1 10.50 2024-05-06
	// d public.orders 1
}
