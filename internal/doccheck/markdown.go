package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Page is what the checks need of one Markdown page.
type Page struct {
	// Anchors holds the slug of every heading, with GitHub's -1, -2, …
	// suffixes for repeated headings.
	Anchors map[string]bool
	// Links are the targets of inline links and images, outside code.
	Links []Ref
	// Code holds every fenced code block line and every code span, with
	// runs of white space (line breaks of a wrapped span included) made one
	// space.
	Code []Ref
}

// Ref is a piece of a page and the line it starts on (1-based).
type Ref struct {
	Text string
	Line int
}

var (
	headingRe  = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	codeSpanRe = regexp.MustCompile("`([^`]+)`")
	linkRe     = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)`)
)

// Parse reads a Markdown page: its headings' anchors, its links and its code.
// It knows the parts of CommonMark that the project's pages use: ATX
// headings, fenced code blocks, code spans (which may wrap across lines of a
// paragraph) and inline links.
func Parse(content string) Page {
	p := Page{Anchors: map[string]bool{}}
	seen := map[string]int{}
	lines := strings.Split(content, "\n")

	var para []string // the lines of the paragraph being read
	paraStart := 0
	flush := func() {
		if len(para) > 0 {
			p.readParagraph(strings.Join(para, "\n"), paraStart)
		}
		para = nil
	}

	fence := "" // the opening fence of the code block being read, if any
	for i, line := range lines {
		n := i + 1
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
				continue
			}
			p.Code = append(p.Code, Ref{Text: collapse(line), Line: n})
			continue
		}
		if f := openingFence(trimmed); f != "" {
			flush()
			fence = f
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			flush()
			slug := Slug(m[2])
			if k := seen[slug]; k > 0 {
				p.Anchors[slug+"-"+strconv.Itoa(k)] = true
			} else {
				p.Anchors[slug] = true
			}
			seen[slug]++
			p.readParagraph(m[2], n) // a heading's code and links count too
			continue
		}
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, line)
	}
	flush()
	return p
}

// openingFence returns the fence (``` or ~~~, three or more) that line opens,
// or "".
func openingFence(line string) string {
	for _, c := range []string{"`", "~"} {
		if strings.HasPrefix(line, c+c+c) {
			n := len(line) - len(strings.TrimLeft(line, c))
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// readParagraph records the code spans and then the links of text, which
// starts on line start.
func (p *Page) readParagraph(text string, start int) {
	lineOf := func(offset int) int { return start + strings.Count(text[:offset], "\n") }
	for _, m := range codeSpanRe.FindAllStringSubmatchIndex(text, -1) {
		p.Code = append(p.Code, Ref{Text: collapse(text[m[2]:m[3]]), Line: lineOf(m[0])})
	}
	// Links inside code are not links: blank the spans out, keeping offsets.
	outside := codeSpanRe.ReplaceAllStringFunc(text, func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
	for _, m := range linkRe.FindAllStringSubmatchIndex(outside, -1) {
		p.Links = append(p.Links, Ref{Text: outside[m[4]:m[5]], Line: lineOf(m[0])})
	}
}

// Slug returns the anchor GitHub gives a heading whose Markdown text is
// heading: links reduced to their text, lower-cased, every character but
// letters, digits, marks, '_' and '-' dropped, each space made '-'.
func Slug(heading string) string {
	text := linkRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// collapse makes every run of white space in s one space, and trims it.
func collapse(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
