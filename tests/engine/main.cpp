#define BOOST_TEST_MODULE engine
#include <boost/test/unit_test.hpp>
