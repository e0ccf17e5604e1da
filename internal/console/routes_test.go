package console

import (
	"slices"
	"testing"

	"github.com/modelgateway/gateway/internal/roles"
)

// TestEveryRouteHasAccess holds each console's registered routes against
// its table of access: a route registered without an entry would be
// refused to everyone, an entry without a route is stale.
func TestEveryRouteHasAccess(t *testing.T) {
	op := NewOperator(OperatorOptions{})
	cust := newRouteMux()
	Mount(cust, APIOptions{})
	NewCustomer(CustomerOptions{}).Mount(cust)
	for _, c := range []struct {
		name     string
		patterns []string
		table    map[string]access
	}{
		{"operator console", op.mux.patterns, operatorRoutes},
		{"customer console", cust.patterns, customerRoutes},
	} {
		for _, p := range c.patterns {
			if _, ok := c.table[p]; !ok {
				t.Errorf("%s: route %q is not in the table of access", c.name, p)
			}
		}
		for p := range c.table {
			// GET /v1/usage is the control handler's, read through
			// Customer.Wrap.
			if !slices.Contains(c.patterns, p) && p != "/v1/usage" {
				t.Errorf("%s: the table of access has %q, which is no route", c.name, p)
			}
		}
	}
}

func TestRolesAllow(t *testing.T) {
	id := func(r ...roles.Role) *Identity { return &Identity{Actor: "x", Roles: r} }
	for _, c := range []struct {
		table   map[string]access
		pattern string
		who     *Identity
		want    bool
	}{
		{customerRoutes, "POST " + PathKeysAPI, id(roles.Billing), false},
		{customerRoutes, "POST " + PathKeysPage, id(roles.Billing), false},
		{customerRoutes, "GET " + PathKeysPage, id(roles.Billing), false},
		{customerRoutes, PathLedgerCSV, id(roles.Billing), true},
		{customerRoutes, PathLedgerCSV, id(roles.Viewer), false},
		{customerRoutes, PathLedgerCSV, id(roles.Member), false},
		{customerRoutes, "POST " + PathKeysAPI, id(roles.Member), true},
		{customerRoutes, "POST " + PathKeysAPI, id(roles.Viewer), false},
		{customerRoutes, "POST " + PathKeysAPI, id(roles.Billing, roles.Member), true},
		{customerRoutes, "GET " + PathAuditAPI, id(roles.Owner), true},
		{customerRoutes, "GET " + PathAuditAPI, id(roles.Member), false},
		{customerRoutes, PathDaily, id(roles.Viewer), true},
		{customerRoutes, PathDaily, nil, false},
		{customerRoutes, "GET " + PathSSOLogin, nil, true},
		{customerRoutes, "GET /console/nowhere", id(roles.Owner), false},
		{operatorRoutes, "POST /accounts/{id}/topup", id(roles.Support), false},
		{operatorRoutes, "POST /accounts/{id}/topup", id(roles.Operator), true},
		{operatorRoutes, "GET /accounts/{id}", id(roles.Support), true},
		{operatorRoutes, "GET /accounts/{id}", id(roles.Owner), false},
		{operatorRoutes, "POST /signout", id(roles.Support), true},
	} {
		if got := allowed(c.table, c.pattern, c.who); got != c.want {
			t.Errorf("allowed(%q, %v) = %v, want %v", c.pattern, c.who, got, c.want)
		}
	}
}
