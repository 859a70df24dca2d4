package policy

import (
	"fmt"
	"strconv"
)

// maxFindings bounds what one object's validation reports of each sort:
// an object of many bad fields gets the first ones and a count.
const maxFindings = 20

// Findings are what the validation of one object found, each naming the
// field: Errors refuse the object (the validating webhook denies it, a
// generator skips it); Warnings admit it with a note, as Istio's warnings.
type Findings struct {
	Errors   []string
	Warnings []string
	// MoreErrors and MoreWarnings count those beyond maxFindings.
	MoreErrors, MoreWarnings int
}

// OK reports whether nothing refuses the object.
func (f *Findings) OK() bool { return len(f.Errors) == 0 }

func (f *Findings) errorf(path, format string, args ...any) {
	if len(f.Errors) >= maxFindings {
		f.MoreErrors++
		return
	}
	f.Errors = append(f.Errors, path+": "+fmt.Sprintf(format, args...))
}

func (f *Findings) warnf(path, format string, args ...any) {
	if len(f.Warnings) >= maxFindings {
		f.MoreWarnings++
		return
	}
	f.Warnings = append(f.Warnings, path+": "+fmt.Sprintf(format, args...))
}

// check records msg, a reason without the path, as an error when not empty.
func (f *Findings) check(path, msg string) {
	if msg != "" {
		f.errorf(path, "%s", msg)
	}
}

func at(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func key(path, k string) string { return path + "[" + truncate(k) + "]" }

func quote(s string) string { return strconv.Quote(truncate(s)) }

// truncate bounds user text quoted in a reason.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
