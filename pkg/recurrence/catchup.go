package recurrence

// CatchUp says which occurrences whose time passed unplanned (a pause, an
// outage of every planner) are still charged when planning resumes.
type CatchUp int

// The catch-up policies.
const (
	// SkipMissed charges none of them: never three months in one burst.
	SkipMissed CatchUp = iota
	// LatestOnly charges the most recent one.
	LatestOnly
	// All charges them, at most the bound, the most recent ones.
	All
)

// Keep is what of missed (in order, oldest first) is still charged under
// c; bound caps All.
func (c CatchUp) Keep(missed []Occurrence, bound int) []Occurrence {
	switch {
	case len(missed) == 0 || c == SkipMissed:
		return nil
	case c == LatestOnly:
		return missed[len(missed)-1:]
	case bound > 0 && len(missed) > bound:
		return missed[len(missed)-bound:]
	default:
		return missed
	}
}
