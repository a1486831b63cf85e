package apitest

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// maxRepeat bounds how far a drawn repeat goes past its minimum, so that
// drawn strings stay short.
const maxRepeat = 8

// ecmaCodepoint is an ECMA-262 \uXXXX escape, which Go's syntax spells
// \x{XXXX} (kin-openapi rewrites patterns the same way).
var ecmaCodepoint = regexp.MustCompile(`\\u([0-9A-Fa-f]{4})`)

// fromPattern draws a string that pattern, an OpenAPI (ECMA-262) regular
// expression, matches.
func (g *Gen) fromPattern(pattern string) string {
	re, err := syntax.Parse(ecmaCodepoint.ReplaceAllString(pattern, `\x{$1}`), syntax.Perl)
	if err != nil {
		panic("apitest: pattern " + pattern + ": " + err.Error())
	}
	var b strings.Builder
	g.emit(&b, re)
	return b.String()
}

func (g *Gen) emit(b *strings.Builder, re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			b.WriteRune(r)
		}
	case syntax.OpCharClass:
		b.WriteRune(g.classRune(re.Rune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(alnumChars[g.rnd.IntN(len(alnumChars))])
	case syntax.OpCapture:
		g.emit(b, re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			g.emit(b, sub)
		}
	case syntax.OpAlternate:
		g.emit(b, re.Sub[g.rnd.IntN(len(re.Sub))])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if hi < 0 || hi > lo+maxRepeat {
			hi = lo + maxRepeat
		}
		for range lo + g.rnd.IntN(hi-lo+1) {
			g.emit(b, re.Sub[0])
		}
	}
	// Anchors, word boundaries and empty matches emit nothing.
}

// classRune draws a rune of a character class, given as ranges lo, hi, ...:
// a range at random, then a rune in it, never a surrogate.
func (g *Gen) classRune(ranges []rune) rune {
	for {
		i := 2 * g.rnd.IntN(len(ranges)/2)
		lo, hi := ranges[i], ranges[i+1]
		if r := lo + rune(g.rnd.IntN(int(hi-lo)+1)); utf8.ValidRune(r) {
			return r
		}
	}
}
