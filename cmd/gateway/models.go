package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

func modelsCmd() *cobra.Command {
	var (
		cfgPath string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the models each upstream serves, with their effective prices",
		Long: "Reads gateway.yaml and the price catalogue it names, as the sidecar does, and lists every\n" +
			"model each upstream serves: its names, its prices at each service tier and prompt length\n" +
			"(USD per million tokens; web searches in USD per search) and its maximum output.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			book, err := pricing.NewBook(cfg, operations.All.Modes())
			if err != nil {
				return err
			}
			rows := modelRows(cfg, book)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			return writeModelTable(cmd.OutOrStdout(), rows)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// modelRow is one served model in `gateway models --json`.
type modelRow struct {
	Upstream string `json:"upstream"`
	// Model is the priced name; "*" for the upstream's fallback price.
	Model     string   `json:"model"`
	Aliases   []string `json:"aliases,omitempty"`
	Source    string   `json:"source"`
	MaxOutput int64    `json:"max_output"` // 0: the catalogue does not say
	// Operations are the upstream's operations that serve the model
	// ("chat_completions", "responses", "embeddings", "messages").
	Operations []string `json:"operations"`
	// Prices lists the unit prices at every service tier and long-context
	// threshold the model has, the standard ones first.
	Prices []priceRow `json:"prices"`
}

// priceRow is the price of each usage kind at one tier and prompt length, in
// nano-USD per million units (tokens; searches for web_searches): exact
// integers, as the gateway computes with.
type priceRow struct {
	Tier  string           `json:"tier,omitempty"`  // "" for the standard tier
	Above int64            `json:"above,omitempty"` // prompts above this many tokens; 0 for all
	Rates map[string]int64 `json:"nano_usd_per_million"`
}

func modelRows(cfg *config.Config, book pricing.Book) []modelRow {
	var rows []modelRow
	for _, u := range cfg.Upstreams {
		t := book[u.Name]
		if t == nil {
			continue
		}
		for _, m := range t.PriceList("*") {
			ops := extproc.ServingOperations(u, t, operations.All, m)
			if len(ops) == 0 {
				continue // in the catalogue, but no operation of the upstream serves it
			}
			row := modelRow{Upstream: u.Name, Model: string(m.Name), Aliases: m.Aliases, Source: m.Source, MaxOutput: m.MaxOutput, Operations: ops}
			for _, above := range append([]int64{0}, m.Thresholds()...) {
				for _, tier := range append([]string{""}, m.Tiers()...) {
					r, _ := m.RatesFor(above+boolInt(above > 0), tier)
					rates := map[string]int64{}
					for _, k := range usage.Kinds {
						if k.Priced() && r.Of(k) != 0 {
							rates[k.Name] = r.Of(k)
						}
					}
					row.Prices = append(row.Prices, priceRow{Tier: tier, Above: above, Rates: rates})
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// writeModelTable prints one line per model with its standard prices in USD
// per million tokens (web searches per search), and the tiers and
// long-context thresholds that change them.
func writeModelTable(w io.Writer, rows []modelRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tMODEL\tOPERATIONS\tMAX OUTPUT\tINPUT\tOUTPUT\tCACHE READ\tCACHE 5M\tCACHE 1H\tAUDIO IN\tAUDIO OUT\tSEARCH\tTIERS\tLONG CONTEXT\tSOURCE\tALIASES")
	for _, r := range rows {
		std := r.Prices[0].Rates
		usd := func(kind string) string {
			n, ok := std[kind]
			if !ok {
				return "-"
			}
			if kind == "web_searches" {
				n /= 1_000_000 // per search
			}
			return strconv.FormatFloat(float64(n)/pricing.NanoPerUSD, 'f', -1, 64)
		}
		var tiers, long []string
		for _, p := range r.Prices[1:] {
			if p.Above == 0 && p.Tier != "" {
				tiers = append(tiers, p.Tier)
			}
			if p.Tier == "" && p.Above > 0 {
				long = append(long, fmt.Sprintf(">%dk", p.Above/1000))
			}
		}
		maxOut := "-"
		if r.MaxOutput > 0 {
			maxOut = strconv.FormatInt(r.MaxOutput, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Upstream, r.Model, strings.Join(r.Operations, ","), maxOut, usd("input"), usd("output"), usd("cache_read"), usd("cache_write_5m"),
			usd("cache_write_1h"), usd("audio_input"), usd("audio_output"), usd("web_searches"),
			orDash(strings.Join(tiers, ",")), orDash(strings.Join(long, ",")), r.Source, orDash(strings.Join(r.Aliases, ",")))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
