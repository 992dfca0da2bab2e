#define BOOST_TEST_MODULE tokenizer
#include <boost/test/unit_test.hpp>
