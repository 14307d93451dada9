package fault

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"log"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// SOAP faults: what a synchronous method (no task) answers, and the HTTP layer that gives every SOAP fault
// gpusim raises its faultstring.

// FromFarm maps a farm error onto the vim fault vSphere answers for it.
func FromFarm(err error) *soap.Fault {
	msg := err.Error()
	switch {
	case errors.Is(err, farm.ErrGPUBusy):
		return simulator.Fault(msg, &types.ResourceInUse{Name: msg})
	case errors.Is(err, farm.ErrNotFound):
		return simulator.Fault(msg, &types.NotFound{})
	case errors.Is(err, farm.ErrNotCapable):
		return simulator.Fault(msg, &types.NotSupported{})
	case errors.Is(err, farm.ErrInsufficient):
		return simulator.Fault(farm.InsufficientGraphics, InsufficientGraphics())
	default:
		return simulator.Fault(msg, &types.InvalidArgument{InvalidProperty: msg})
	}
}

// InvalidArgument: the request's property names nothing gpusim knows (msg says what).
func InvalidArgument(property, msg string) *soap.Fault {
	return simulator.Fault(msg, &types.InvalidArgument{InvalidProperty: property})
}

// NotFound: the request names something that does not exist.
func NotFound(msg string) *soap.Fault { return simulator.Fault(msg, &types.NotFound{}) }

// NotSupported: the request names something gpusim does not model.
func NotSupported(msg string) *soap.Fault { return simulator.Fault(msg, &types.NotSupported{}) }

var (
	emptyFaultString = []byte("<faultstring></faultstring>")
	markedMessage    = regexp.MustCompile(`<faultMessage><key>` + regexp.QuoteMeta(messageKey) + `</key><message>([^<]*)</message>`)
)

// WithFaultString fills the empty faultstring of a SOAP fault response from its gpusim faultMessage,
// so that clients which read the message from faultstring (pyVmomi's msg) see it.
func WithFaultString(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := &faultWriter{ResponseWriter: w}
		next.ServeHTTP(fw, r)
		fw.finish()
	})
}

// faultWriter buffers HTTP 500 responses (SOAP faults) and passes everything else through.
type faultWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (fw *faultWriter) WriteHeader(code int) {
	if code == http.StatusInternalServerError && fw.buf == nil {
		fw.buf = new(bytes.Buffer)
		return
	}
	fw.ResponseWriter.WriteHeader(code)
}

func (fw *faultWriter) Write(b []byte) (int, error) {
	if fw.buf != nil {
		return fw.buf.Write(b)
	}
	return fw.ResponseWriter.Write(b)
}

func (fw *faultWriter) finish() {
	if fw.buf == nil {
		return
	}
	body := fw.buf.Bytes()
	if bytes.Contains(body, emptyFaultString) {
		if m := markedMessage.FindSubmatch(body); m != nil {
			filled := append(append([]byte("<faultstring>"), m[1]...), "</faultstring>"...)
			body = bytes.Replace(body, emptyFaultString, filled, 1)
		}
	}
	fw.ResponseWriter.Header().Del("Content-Length")
	fw.ResponseWriter.WriteHeader(http.StatusInternalServerError)
	_, _ = fw.ResponseWriter.Write(body)
}

// Recover turns a panic while serving a request into a SOAP SystemError fault.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				log.Printf("gpusim: request panic: %v\n%s", v, debug.Stack())
				var msg strings.Builder
				_ = xml.EscapeText(&msg, []byte(fmt.Sprintf("gpusim could not serve the request: %v", v)))
				w.Header().Set("Content-Type", "text/xml; charset=utf-8")
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>%s</faultstring><detail><SystemErrorFault xmlns="urn:vim25" xsi:type="SystemError"><reason>%s</reason></SystemErrorFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>`,
					msg.String(), msg.String())
			}
		}()
		next.ServeHTTP(w, r)
	})
}
