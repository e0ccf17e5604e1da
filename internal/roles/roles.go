// Package roles names what a person signed in to a console may do: the
// customer console's roles, held by a customer's people within their
// account, and the operator console's, held by the operator's people.
// internal/console checks them on every page and data API call; config
// validates the claim-to-role mapping against them.
package roles

import "slices"

// Role is one role a signed-in person holds.
type Role string

// The customer console's roles, most powerful first.
const (
	// Owner may do everything the customer console offers.
	Owner Role = "owner"
	// Admin manages keys and limits and reads everything.
	Admin Role = "admin"
	// Member reads spend and creates keys.
	Member Role = "member"
	// Billing reads spend and exports it; it never sees or makes keys.
	Billing Role = "billing"
	// Viewer reads spend and the account's keys, and changes nothing.
	Viewer Role = "viewer"
)

// The operator console's roles.
const (
	// Operator may do everything the operator console offers.
	Operator Role = "operator"
	// Support reads every page and changes nothing.
	Support Role = "support"
)

// Customer and OperatorSide are the roles of each console.
var (
	Customer     = []Role{Owner, Admin, Member, Billing, Viewer}
	OperatorSide = []Role{Operator, Support}
)

// Valid reports whether r is a role of either console.
func Valid(r Role) bool {
	return slices.Contains(Customer, r) || slices.Contains(OperatorSide, r)
}

// Set is the roles a route allows.
type Set []Role

// Allows reports whether any of held is in s.
func (s Set) Allows(held []Role) bool {
	for _, r := range held {
		if slices.Contains(s, r) {
			return true
		}
	}
	return false
}

// Of returns those of held that belong to side (Customer or OperatorSide).
func Of(held []Role, side []Role) []Role {
	var out []Role
	for _, r := range held {
		if slices.Contains(side, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
