package limits

// Class is what a request is to the admission control, from the work it
// must never refuse to the work it refuses first.
type Class int

const (
	// Exempt requests are never limited nor counted against the limit:
	// health and readiness probes, metrics, River UI, and the replays of
	// bookings this process saw finish (answered from memory).
	Exempt Class = iota
	// Priority requests keep a guaranteed share of the limit: completing,
	// cancelling and refunding rides, the processors' notifications, the
	// rider's return from an authentication, and the retries of bookings
	// this process admitted and has not seen finish (a continuation past
	// a recovery point).
	Priority
	// Booking requests are new bookings and every request not named in
	// another class.
	Booking
	// List requests are lists and pages: shed first.
	List

	numClasses
)

// Classes lists the limited classes, in the order the queue serves them.
var Classes = []Class{Priority, Booking, List}

var classNames = [numClasses]string{"exempt", "priority", "booking", "list"}

// String is the class's name in the metrics.
func (c Class) String() string {
	if c < 0 || c >= numClasses {
		return "unknown"
	}
	return classNames[c]
}

// classShares are the shares of the limit: a request of a class is admitted
// while the requests in flight, of every class, are fewer than its share of
// the limit. Lists may fill half of it, bookings four fifths, and the last
// fifth is kept for priority work, which may fill all of it.
var classShares = [numClasses]float64{Exempt: 0, Priority: 1, Booking: 0.8, List: 0.5}

// Share is the share of the limit requests of class c may fill.
func (c Class) Share() float64 {
	if c < 0 || c >= numClasses {
		return 0
	}
	return classShares[c]
}
