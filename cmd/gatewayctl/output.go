package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// jsonOptions print field names as in the .proto file and every field, set
// or not, so that scripts find the keys they expect. int64 fields are JSON
// strings, as protojson requires.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true, Indent: "  "}

// show prints m as JSON with --json, else as human calls for.
func (a *app) show(m proto.Message, human func(w io.Writer)) error {
	if a.json {
		b, err := jsonOptions.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// when shows a timestamp in UTC, or "-" when unset.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// limit shows a limit, "none" for zero.
func limit(n int64, usd bool) string {
	switch {
	case n == 0:
		return "none"
	case usd:
		return formatUSD(n)
	}
	return fmt.Sprint(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
