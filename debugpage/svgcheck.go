package debugpage

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// A snapshot's maps are SVG the page writes into its HTML as they are (the picture taken then,
// drawn from data the snapshot does not keep in a form that could draw it again). A snapshot
// file comes from elsewhere: checkMapSVG lets through only what writeSVG draws, so that a file
// cannot put markup of its own (a script, a link, a form) into the page that shows it.

// svgNamespace is the namespace of the maps' <svg> element.
const svgNamespace = "http://www.w3.org/2000/svg"

// svgElements are the elements writeSVG draws.
var svgElements = map[string]bool{"svg": true, "g": true, "rect": true, "text": true, "title": true}

// svgValue is what the value of an attribute of writeSVG's may hold: numbers, colours, class
// and keyword names.
var svgValue = regexp.MustCompile(`^[a-z0-9 #.-]*$`)

// svgAttributes are the attributes writeSVG draws, and the check of their values.
var svgAttributes = map[string]func(string) bool{
	"xmlns":       func(v string) bool { return v == svgNamespace },
	"style":       func(v string) bool { return v == fontFamily },
	"class":       svgValue.MatchString,
	"x":           svgValue.MatchString,
	"y":           svgValue.MatchString,
	"width":       svgValue.MatchString,
	"height":      svgValue.MatchString,
	"fill":        svgValue.MatchString,
	"font-weight": svgValue.MatchString,
	"text-anchor": svgValue.MatchString,
}

// checkMapSVG returns nil for "" and for a map as writeSVG draws it: one <svg> element of
// <g>, <rect>, <text> and <title> elements, their attributes writeSVG's, and text; it says
// what else it found otherwise.
func checkMapSVG(s string) error {
	if s == "" {
		return nil
	}
	// Comments, CDATA sections, declarations and processing instructions: XML and HTML read
	// them differently (inside an SVG <title>, HTML ends "<![CDATA[" at the first ">").
	if strings.Contains(s, "<!") || strings.Contains(s, "<?") {
		return errors.New("markup declaration or processing instruction")
	}
	d := xml.NewDecoder(strings.NewReader(s))
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
			}
			if depth == 0 && (roots > 1 || tok.Name.Local != "svg") {
				return fmt.Errorf("<%s> outside the map's <svg>", tok.Name.Local)
			}
			if !svgElements[tok.Name.Local] || (tok.Name.Space != "" && tok.Name.Space != svgNamespace) {
				return fmt.Errorf("element <%s>", tok.Name.Local)
			}
			for _, a := range tok.Attr {
				ok := svgAttributes[a.Name.Local]
				if a.Name.Space != "" || ok == nil || !ok(a.Value) {
					return fmt.Errorf("<%s> attribute %s=%q", tok.Name.Local, a.Name.Local, a.Value)
				}
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if depth == 0 && strings.TrimSpace(string(tok)) != "" {
				return errors.New("text outside the map's <svg>")
			}
		default:
			return fmt.Errorf("unexpected %T", tok)
		}
	}
	if roots != 1 || depth != 0 {
		return errors.New("not one whole <svg> element")
	}
	return nil
}
